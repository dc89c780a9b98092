"""lmcore's kernels on torch tensors, with autograd, under PyTorch 2.13's names.

    import lmcore.torch as lt
    loss = lt.LinearCrossEntropyLoss(H, V)(hidden, target)      # fused projection + cross-entropy

Code written for torch.nn.LinearCrossEntropyLoss runs by changing the import. Tensors are handed to
the C++ kernels zero-copy (lmcore.torch._convert says how); the arithmetic stays in C++.
"""
from lmcore.torch._convert import from_lmcore, to_lmcore  # noqa: F401
from lmcore.torch._loss import LinearCrossEntropyLoss, linear_cross_entropy  # noqa: F401

__all__ = ["LinearCrossEntropyLoss", "linear_cross_entropy", "to_lmcore", "from_lmcore"]
