"""lmcore.torch.load / save: checkpoints as dict[str, torch.Tensor] without unpickling.

    state = lmcore.torch.load("model.safetensors")          # or a torch.save zip, legacy .pt, .npy, .npz
    lmcore.torch.save(model.state_dict(), "model.pt")   # torch.save's zip: torch.load(weights_only=True) reads it

load reads every format lmcore.load reads (detected from the bytes; no Python object is ever
unpickled). With mmap=True the tensors view the mapped file zero-copy wherever the file's layout
allows; the mapping is private (copy-on-write), so an in-place op on a loaded tensor changes that
tensor and never the file. Nested dicts come back flattened with dotted names. Big-endian .npy data
is converted on load. dtypes torch 1.13 lacks (float8, uint16/32/64) are refused naming the tensor.

save writes safetensors (names sorted, with optional metadata) or torch.save's zip format,
atomically; the format comes from the extension unless format= names it. Tensors that require grad
are saved detached; bool tensors are written as bool; every value must be a CPU torch tensor (the
key is named otherwise).
"""
import os

import torch

from lmcore import _lmcore
from lmcore.torch._convert import check_tensor, from_lmcore, to_lmcore

_NO_TORCH_DTYPE = ("f8_e4m3fn", "f8_e5m2", "u16", "u32", "u64")


def load(path, mmap=True):
    """dict name -> torch.Tensor of the checkpoint at path (zero-copy views of the mapped file with mmap)."""
    path = os.fspath(path)
    tensors = _lmcore.load(path, mmap=bool(mmap))
    out = {}
    for name, t in tensors.items():
        if t.dtype in _NO_TORCH_DTYPE:
            raise TypeError(f"{path}: tensor '{name}' is {t.dtype}, which torch 1.13 has no dtype for "
                            f"(use lmcore.load for it)")
        out[name] = from_lmcore(t)
    return out


def save(state_dict, path, format=None, metadata=None):
    """Writes state_dict (name -> CPU torch tensor) as safetensors or in torch.save's zip format;
    format None: from the extension, as `lmcore convert` decides (.safetensors; .pt .pth .bin .ckpt)."""
    path = os.fspath(path)
    if format is None:
        # Not safetensors whatever the name: torch.load of a "model.pt" holding safetensors fails with
        # "invalid load key", far from the save that caused it.
        format = {"safetensors": "safetensors", "pytorch-zip": "torch"}.get(_lmcore.output_format_for(path))
        if format is None:
            raise ValueError(f"{path}: cannot tell the format from the extension (.safetensors, or .pt .pth .bin "
                             f".ckpt for torch.save's); pass format='safetensors' or format='torch'")
    if format not in ("safetensors", "torch"):
        raise ValueError(f"format: expected 'safetensors' or 'torch', found {format!r}")
    if not hasattr(state_dict, "items"):
        raise TypeError(f"state_dict: expected a mapping name -> torch.Tensor, found {type(state_dict).__name__}")
    if metadata is not None and format != "safetensors":
        raise ValueError("metadata: only the safetensors format stores metadata")
    tensors = {}
    for name, t in state_dict.items():
        if not isinstance(name, str):
            raise TypeError(f"state_dict: keys must be str, found {type(name).__name__} ({name!r})")
        check_tensor(t, f"state_dict['{name}']")
        tensors[name] = to_lmcore(t, f"state_dict['{name}']")
    if format == "safetensors":
        _lmcore.save_safetensors(path, tensors, {str(k): str(v) for k, v in (metadata or {}).items()})
    else:
        _lmcore.save_torch(path, tensors)
