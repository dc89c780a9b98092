import os
import pathlib

import pandas as pd
import torch
from torch import Tensor

imgs = torch.randn(2, 3, names=("N", "C"))  # expect: UPG207
z = torch.zeros(2, names=None)  # expect: UPG207
print(imgs.names)  # expect: UPG201
imgs = imgs.refine_names("N", "C")  # expect: UPG202
imgs.rename(None)  # expect: UPG203
imgs.rename_("A", "B")  # expect: UPG203
t = imgs.align_to("C", "N")  # expect: UPG204
u = imgs.align_as(t)  # expect: UPG205
if imgs.has_names():  # expect: UPG206
    pass
aligned = torch.align_tensors(imgs, t)  # expect: UPG208
flat = imgs.unflatten("C", (("C1", 1), ("C2", 3)))  # expect: UPG209
plain = imgs.unflatten(1, (1, 3))
s = imgs.sum("C")  # expect: UPG210
m = torch.mean(imgs, dim="N")  # expect: UPG210
p = imgs.softmax(dim="C")  # expect: UPG210
layer = torch.nn.Unflatten("features", (("C", 2), ("H", 4)))  # expect: UPG209


def describe(x: Tensor):
    return x.names  # expect: UPG201


def generic(node, frame, thing):
    a = node.names  # expect: UPG201
    frame.rename(columns={"a": "b"})
    thing.rename("A", "B")  # expect: UPG203
    pathlib.Path("a").rename("b")
    os.rename("a", "b")
    node.rename("new_name")
    pd.concat([frame], axis=1)
    frame.mean(dim="x")  # expect: UPG210
    node.names()
    return a


def f(x, dim="N"):
    return x.transpose("H", "W")  # expect: UPG210


unbound = torch.Tensor.refine_names  # expect: UPG202
