import torch.distributed as dist

a = b = None
dist.all_gather_into_tensor(a, b)  # noqa: UPG101
dist.reduce_scatter_tensor(a, b)  # noqa
dist.reduce_scatter_tensor(a, b)  # NOQA: UPG1
dist.reduce_scatter_single(a, b)  # noqa: UPG201  # expect: UPG102
