"""Conversions between torch tensors and lmcore tensors for the core op tests.

torch 1.13 exports bool through DLPack as uint8, so bool tensors go through NumPy instead.
"""
import numpy as np
import torch
import torch.utils.dlpack

import lmcore

ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
              torch.int16, torch.int32, torch.int64, torch.bool]
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def to_lm(t):
    if t.dtype == torch.bool:
        return lmcore.from_numpy(t.numpy())
    return lmcore.from_dlpack(torch.utils.dlpack.to_dlpack(t))


def to_torch(t):
    if t.dtype == "bool":
        return torch.from_numpy(np.array(t.numpy(), copy=True))
    return torch.utils.dlpack.from_dlpack(t)


def rand(shape, dtype, gen, lo=-4.0, hi=4.0):
    """Random values; integers are small so ties and equal elements occur."""
    x = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    if dtype == torch.bool:
        return x > (lo + hi) / 2
    if not dtype.is_floating_point:
        x = x.floor()
        if dtype == torch.uint8:
            x = x.abs()
    return x.to(dtype)


def strided(t):
    """A non-contiguous view holding t's values (every other element of the last dim)."""
    if t.dim() == 0:
        return t
    shape = list(t.shape)
    shape[-1] *= 2
    buf = torch.zeros(shape, dtype=t.dtype)
    view = buf[..., ::2]
    view.copy_(t)
    return view


def assert_same(got, want, msg=""):
    """Exact equality (NaN equal to NaN) with the first mismatches in the message."""
    got = got.to(want.dtype) if got.dtype != want.dtype else got
    assert got.shape == want.shape, f"{msg}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{msg}: dtype {got.dtype} vs {want.dtype}"
    if want.dtype.is_floating_point:
        eq = (got == want) | (torch.isnan(got) & torch.isnan(want))
    else:
        eq = got == want
    if not bool(eq.all()):
        bad = (~eq).nonzero()[:5].tolist()
        pairs = [(i, got[tuple(i)].item(), want[tuple(i)].item()) for i in bad]
        raise AssertionError(f"{msg}: {int((~eq).sum())} of {want.numel()} differ, first {pairs}")


def assert_close(got, want, rtol, atol, msg=""):
    assert got.shape == want.shape, f"{msg}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{msg}: dtype {got.dtype} vs {want.dtype}"
    g, w = got.double(), want.double()
    ok = ((g - w).abs() <= atol + rtol * w.abs()) | (torch.isnan(g) & torch.isnan(w)) | (g == w)
    if not bool(ok.all()):
        bad = (~ok).nonzero()[:5].tolist()
        pairs = [(i, g[tuple(i)].item(), w[tuple(i)].item()) for i in bad]
        worst = (g - w).abs()[~ok].max().item()
        raise AssertionError(f"{msg}: {int((~ok).sum())} of {w.numel()} differ (max {worst}), first {pairs}")
