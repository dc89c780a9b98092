"""A file that uses torch: its tensors' own methods, and NumPy and widget calls beside them."""  # none
import numpy as np  # none
import torch  # none
import torch.distributed as dist  # none

t = torch.randn(4, 3)  # none
fro = t.norm("fro")  # none
nuc = t.norm(p="nuc")  # none
flat = t.flatten(0, 1)  # none
named_flat = t.flatten(0, 1, "features")  # expect: UPG210
order = np.zeros((2, 2)).flatten("F")  # none
s = t.sum("C")  # expect: UPG210
events = t.unbind("<KeyPress>")  # none
rows = t.unbind(0)  # none
fields = np.dtype([("x", "f4")]).names  # low: UPG201


def columns(x):  # none
    return x.names  # expect: UPG201


def pick(x):  # none
    return x.softmax(dim="C")  # expect: UPG210


def widget(w):  # none
    w.unbind("<KeyPress>")  # none
    return w.flatten("F")  # none


fn = dist.all_gather_into_tensor  # expect: UPG101


def gather():  # none
    return fn  # none


fn(t, t)  # none
