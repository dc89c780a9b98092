import functools

import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as funcol


@functools.wraps(dist.all_gather_single)  # expect: UPG101
def my_gather(*args, **kwargs):
    return dist.all_gather_single(*args, **kwargs)  # expect: UPG101


@torch.no_grad()
@funcol.reduce_scatter_single  # expect: UPG103
def weird(x):
    return x


class Wrapper:
    op = staticmethod(dist.reduce_scatter_single)  # expect: UPG102

    def all_gather_into_tensor(self, x):  # a method of the same name: not torch's
        return self.all_gather_into_tensor(x)  # an attribute of self: not torch's
