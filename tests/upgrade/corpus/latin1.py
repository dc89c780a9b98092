# -*- coding: latin-1 -*-
import torch.distributed as dist

name = "café"
dist.all_gather_into_tensor(name, name)  # expect: UPG101
