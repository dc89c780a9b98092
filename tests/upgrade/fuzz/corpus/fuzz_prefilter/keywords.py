import torch
z = torch.zeros(2, names=None)
l = torch.nn.Unflatten("C", (("A", 2), ("B", 3)))
t.unflatten(1, sizes=(("a", 1),))
s = torch.sum
s(t, "C")
