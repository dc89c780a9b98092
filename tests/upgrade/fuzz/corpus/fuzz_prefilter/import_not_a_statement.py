i      import torch
t = torch.align_as()
