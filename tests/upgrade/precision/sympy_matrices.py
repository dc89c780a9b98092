"""SymPy: Matrix.norm('fro') is the Frobenius norm, not a dimension."""  # none
from sympy import Matrix, symbols  # none

x, y = symbols("x y")  # none
A = Matrix([[1, 2], [3, 4]])  # none
fro = A.norm("fro")  # none
two = A.norm(2)  # none
flat = A.flatten("F") if hasattr(A, "flatten") else A  # none
d = (x * y).diff("x")  # none
B = A.transpose()  # none
s = A.select("rows", 0)  # low: UPG210
