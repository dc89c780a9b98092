from torch.distributed import *
from torch.distributed._functional_collectives import *

a = b = g = None
all_gather_into_tensor(a, b)  # expect: UPG101
all_gather_tensor_autograd(a, 0, g)  # expect: UPG103
reduce_scatter_tensor(a, b)  # expect: UPG103
