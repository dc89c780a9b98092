import torch.distributed as dist


def f(a, b):
    """CRLF line endings: dist.reduce_scatter_tensor in a docstring."""
    dist.all_gather_single(a, b)  # expect: UPG101
    return dist.reduce_scatter_single(  # expect: UPG102
        a,
        b)
