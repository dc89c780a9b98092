"""Aliased imports of the renamed collectives (this docstring names all_gather_into_tensor: not a finding)."""
import torch
import torch.distributed as dist
import torch.distributed
from torch import distributed as tdist
from torch.distributed import reduce_scatter_single as rs  # expect: UPG102
from torch.distributed import all_gather_single  # expect: UPG101
from torch.distributed.distributed_c10d import reduce_scatter_single  # expect: UPG102
import torch.distributed.distributed_c10d as c10d


def register(**kwargs):
    return kwargs


out = torch.empty(8)
inp = torch.ones(2)
dist.all_gather_single(out, inp)  # expect: UPG101
torch.distributed.reduce_scatter_single(inp, out)  # expect: UPG102
tdist.all_gather_single(out, inp)  # expect: UPG101
rs(inp, out)  # expect: UPG102
all_gather_single(out, inp)  # expect: UPG101
reduce_scatter_single(inp, out)  # expect: UPG102
c10d.all_gather_single(out, inp)  # expect: UPG101
gather = dist
gather.reduce_scatter_single(inp, out)  # expect: UPG102
dist.all_gather(out, inp)  # a different collective: no finding
dist.all_gather_into_tensor_extra = None  # not a renamed name: no finding
register(reduce_scatter_tensor=None)  # a keyword argument's name: no finding
