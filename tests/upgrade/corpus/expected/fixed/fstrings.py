import torch
import torch.distributed as dist

x = torch.zeros(2, 3)
a = f"dist.all_gather_into_tensor and x.names in literal text"
b = f"{dist.all_gather_single}"  # expect: UPG101
c = f"{x.names!r:>{10}}"  # expect: UPG201
d = f'{"dist.reduce_scatter_tensor"}'
e = rf"{{dist.all_gather_into_tensor}}"
g = f"""header
{dist.reduce_scatter_single}"""  # expect: UPG102
