"""Conversions between torch tensors and lmcore tensors, the rules every lmcore.torch op follows.

- A tensor that requires grad is detached before the kernel sees it (autograd is lmcore.torch's job).
- bool crosses both ways although torch 1.13's DLPack has no bool: it travels as uint8 bytes and is
  viewed back as bool (the values are the same bytes, 0 or 1).
- Only CPU tensors are accepted; anything else is an error naming the argument.
- Both directions are zero-copy: the result keeps the source's memory alive.
"""
import torch
from torch.utils.dlpack import from_dlpack as _torch_from_dlpack

from lmcore import _lmcore

_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16"}


def check_tensor(t, name, dtypes=None):
    """Raises TypeError/ValueError naming `name` unless t is a CPU torch tensor of one of `dtypes`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, found {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name}: expected a CPU tensor, found one on {t.device}")
    if dtypes is not None and t.dtype not in dtypes:
        want = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name}: expected dtype {want}, found {str(t.dtype).replace('torch.', '')}")
    return t


def to_lmcore(t, name="tensor"):
    """lmcore.Tensor viewing the torch tensor t (detached; bool through uint8)."""
    check_tensor(t, name)
    t = t.detach()
    if t.dtype == torch.bool:
        return _lmcore.from_dlpack(t.view(torch.uint8)).view_as_dtype("bool")
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    return _lmcore.from_dlpack(t)


def from_lmcore(x):
    """torch tensor viewing the lmcore.Tensor x (bool comes back as bool)."""
    if x.dtype == "bool":
        return _torch_from_dlpack(x.view_as_dtype("u8")).view(torch.bool)
    return _torch_from_dlpack(x)


def lmcore_dtype_name(dtype):
    return _NAMES[dtype]
