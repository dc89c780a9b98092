from pkg.tensors import make  # none

x = make()  # none
print(x.names)  # expect: UPG201
