from .tensors import make  # none

y = make()  # none
y.align_to("N")  # expect: UPG204
