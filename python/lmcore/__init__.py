"""lmcore: LLM training kernels, checkpoint I/O and collectives in C++.

The compiled part is the extension ``lmcore._lmcore``; every public name it defines is re-exported
here, so ``lmcore.flex_attention``, ``lmcore.Tensor`` or ``lmcore.dist.ProcessGroup`` are what they
always were. Pure-Python modules sit beside it:

    lmcore.torch   the kernels on torch tensors with autograd, under PyTorch's names
                   (flex_attention, create_block_mask, LinearCrossEntropyLoss, load, save)

``lmcore.torch`` is imported on first use only, so ``import lmcore`` does not import torch.
"""
import sys as _sys

from lmcore import _lmcore
from lmcore._lmcore import *  # noqa: F401,F403  (the extension's public names are lmcore's)
from lmcore._lmcore import __version__  # noqa: F401

# The extension's submodules (made with pybind11's def_submodule) become importable by their dotted
# names too: `import lmcore.dist` works as `lmcore.dist` always did.
for _name in ("dist", "layers"):
    _sys.modules[f"{__name__}.{_name}"] = getattr(_lmcore, _name)
del _name

