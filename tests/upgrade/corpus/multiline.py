import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed._functional_collectives import (
    all_gather_tensor,  # expect: UPG103
    reduce_scatter_tensor_autograd as rsa,  # expect: UPG103
)

COLLECTIVES = [dist.all_gather_into_tensor, dist.reduce_scatter_tensor]  # expect: UPG101,UPG102
handlers = {"ag": funcol.all_gather_tensor_autograd}  # expect: UPG103


def step(x, group):
    y = dist.all_gather_into_tensor(  # expect: UPG101
        torch.empty(4),
        x,
        group=group,
    )
    z = (
        dist
        .reduce_scatter_tensor  # expect: UPG102
        (x, y)
    )
    fn = funcol.all_gather_tensor  # expect: UPG103
    t = funcol.all_gather_into_tensor_coalesced([x], 0, group)  # expect: UPG104
    u = funcol.reduce_scatter_tensor_coalesced(  # expect: UPG104
        [x], ["sum"], [0], group)
    v = all_gather_tensor(x, 0, group)  # expect: UPG103
    w = rsa(x, "sum", 0, group)  # expect: UPG103
    with_backslash = dist.\
        all_gather_into_tensor  # expect: UPG101
    return y, z, fn, t, u, v, w, with_backslash  # variables that hold the functions: no finding (their assignments are)


def run(op=funcol.reduce_scatter_tensor):  # expect: UPG103
    return op
