"""Error bounds scaled by the result dtype's epsilon and the tensor's magnitude, each shown to reject a
1% error on every use (the Python side of tests/attention/test_util.h).

    |got - want| <= eps(dtype) * (a * max|want| + r * |want|)

`a` covers the spread of rounding across a tensor (errors of sums follow the largest terms, not the
element), `r` the final rounding of each element. close_within() also checks that the same bound
rejects got with (1) its element of largest |want| off by 1% of itself and (2) its element of smallest
|want| off by 1% of max|want|. With LMCORE_TEST_REPORT_ERRORS=1 it prints the measured error in these
units (how the figures in the test files' comments were taken):

    LMCORE_TEST_REPORT_ERRORS=1 python3 -m pytest tests/python/test_attention.py -s -q
"""
import os

import torch

EPS = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float64: 2.0 ** -52}


def _violations(got, want, atol, rtol):
    finite = torch.isfinite(want)
    same_inf = (~finite) & (got == want)
    ok = ((got - want).abs() <= atol + rtol * want.abs()) | same_inf
    return ~ok


def close_within(name, got, want, dtype, a, r=0.0):
    """Asserts got (any dtype) matches want within the bound above for results stored in `dtype`."""
    got = got.detach().to(torch.float64)
    want = want.detach().to(torch.float64)
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    eps = EPS[dtype]
    finite = torch.isfinite(want)
    scale = want[finite].abs().max().item() if finite.any() else 0.0
    atol, rtol = a * eps * scale, r * eps
    diff = torch.where(finite, (got - want).abs(), torch.zeros_like(want))
    if os.environ.get("LMCORE_TEST_REPORT_ERRORS"):
        bound = eps * (a * scale + r * torch.where(finite, want.abs(), torch.zeros_like(want)))
        used = (diff / bound).max().item() if scale > 0 else 0.0
        worst = diff.max().item() if diff.numel() else 0.0
        print(f"[error] {name:40s} {str(dtype)[6:]:9s} max|want| {scale:<10.4g} max|diff| {worst:<10.3g} = "
              f"{worst / (eps * scale) if scale else 0.0:7.3f} eps max|want|; {100 * used:5.1f}% of the bound")
    bad = _violations(got, want, atol, rtol)
    if bad.any():
        idx = int(torch.nan_to_num(torch.where(bad, (got - want).abs(), torch.zeros_like(got)),
                                   nan=float("inf")).flatten().argmax())
        raise AssertionError(f"{name}: {int(bad.sum())} of {got.numel()} elements outside {a} eps max|want| + "
                             f"{r} eps |want| (eps {eps:.3g}, max|want| {scale:.4g}); worst at flat {idx}: "
                             f"got {got.flatten()[idx].item()!r}, want {want.flatten()[idx].item()!r}")
    if scale == 0:
        return
    flat_w = torch.where(finite, want, torch.zeros_like(want)).flatten()
    big = int(flat_w.abs().argmax())
    small = int(torch.where(finite.flatten(), flat_w.abs(), torch.full_like(flat_w, float("inf"))).argmin())
    g = got.flatten().clone()
    g[big] += 0.01 * flat_w[big]
    assert _violations(g, want.flatten(), atol, rtol).any(), \
        f"{name}: the bound ({a} eps max|want| + {r} eps |want|) also passes a 1% error at the largest element"
    g = got.flatten().clone()
    g[small] += 0.01 * scale
    assert _violations(g, want.flatten(), atol, rtol).any(), \
        f"{name}: the bound also passes an error of 1% of max|want| at the smallest element"
