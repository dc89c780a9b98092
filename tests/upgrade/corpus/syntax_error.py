import torch.distributed as dist

dist.all_gather_into_tensor(None, None)  # expect: UPG101
s = 'unterminated  # expect: UPG903
dist.reduce_scatter_tensor(None, None)
