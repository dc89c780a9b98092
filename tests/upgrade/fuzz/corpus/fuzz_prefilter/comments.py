import torch
t = torch.ones(2)
t.kthvalue(2,  # k
  dim="C")
print(f"{t.names} can't")
