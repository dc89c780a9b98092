import torch.distributed as dist

name = "café"  # expect: UPG902
dist.all_gather_into_tensor(name, name)
