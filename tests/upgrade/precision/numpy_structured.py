"""NumPy: `.names` of a structured dtype holds its field names, flatten('F') is the memory order."""  # none
import numpy as np  # none

dt = np.dtype([("x", "f4"), ("y", "i8")])  # none
arr = np.zeros(3, dtype=dt)  # none
fields = arr.dtype.names  # low: UPG201
arr.dtype.names = ("a", "b")  # low: UPG201
for name in dt.names:  # low: UPG201
    print(name)  # none
m = np.arange(6).reshape(2, 3)  # none
flat = m.flatten("F")  # none
ravel = m.ravel(order="F")  # none
total = m.sum(axis=0)  # none
biggest = m.max(0)  # none
fro = np.linalg.norm(m, "fro")  # none
rec = np.rec.fromarrays([[1], [2]], names="a,b")  # none
arr.sort(order="y")  # none
swapped = m.transpose(1, 0)  # none
by_field = arr.sum("x")  # low: UPG210
