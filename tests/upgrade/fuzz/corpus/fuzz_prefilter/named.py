import torch
t = torch.ones(2)
t.sum("C")
x.names
