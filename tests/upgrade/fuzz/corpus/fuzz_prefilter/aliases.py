import torch as T
s = T.sum
x = (t.sum
  ("C"))
y = t.flatten(0, 1, r"F")
