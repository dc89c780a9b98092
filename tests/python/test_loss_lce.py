# lmcore's linear cross-entropy (fused and unfused) against torch 1.13: F.linear + F.cross_entropy
# (label_smoothing, weight, ignore_index, each reduction), with the z-loss and softcap written out in
# torch, for the loss, the z-loss, the logsumexp and every gradient (d_hidden, d_weight, d_bias).
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.dlpack import from_dlpack

import lmcore

IGNORE = -100


def as_torch(t):
    return from_dlpack(t)


def make(n, h, v, seed, dtype=torch.float64, ignore_every=4):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=torch.float64).to(dtype)
    weight = (0.5 * torch.randn(v, h, generator=g, dtype=torch.float64)).to(dtype)
    bias = (0.3 * torch.randn(v, generator=g, dtype=torch.float64)).to(dtype)
    cw = (0.2 + 1.8 * torch.rand(v, generator=g, dtype=torch.float64)).to(dtype)
    target = torch.randint(0, v, (n,), generator=g)
    if ignore_every:
        target[1::ignore_every] = IGNORE
    return hidden, weight, bias, cw, target


def torch_reference(hidden, weight, target, *, bias, class_weight, reduction, label_smoothing, z_loss, softcap,
                    grad):
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    b = bias.clone().requires_grad_() if bias is not None else None
    logits = F.linear(h, w, b)
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    ce = F.cross_entropy(logits, target, weight=class_weight, ignore_index=IGNORE, reduction=reduction,
                         label_smoothing=label_smoothing)
    lse = torch.logsumexp(logits, dim=-1)
    counted = target != IGNORE
    zl_tok = z_loss * lse.square() * counted
    if reduction == "none":
        zl = zl_tok
    elif reduction == "sum":
        zl = zl_tok.sum()
    else:
        zl = zl_tok.sum() / counted.sum()
    loss = ce + zl
    loss.backward(grad)
    return dict(loss=loss.detach(), z_loss=zl.detach(), lse=lse.detach(), d_hidden=h.grad, d_weight=w.grad,
                d_bias=b.grad if b is not None else None)


def check(name, got, want, rtol, atol):
    got = got.to(torch.float64)
    want = want.to(torch.float64)
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if not torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        diff = (got - want).abs()
        idx = int(torch.nan_to_num(diff, nan=float("inf")).flatten().argmax())
        raise AssertionError(f"{name}: max |diff| {diff.max().item():.3e} at flat index {idx}: "
                             f"{got.flatten()[idx].item()} vs {want.flatten()[idx].item()}")


COMBOS = list(itertools.product(["none", "mean", "sum"], [0.0, 0.15], [False, True], [False, True],
                                [(0.0, 0.0), (1e-3, 0.0), (0.0, 4.0), (2e-2, 4.0)]))


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("reduction,ls,use_weight,use_bias,zc", COMBOS)
def test_matches_torch_f64(fused, reduction, ls, use_weight, use_bias, zc):
    z, cap = zc
    n, h, v = 22, 12, 45
    hidden, weight, bias, cw, target = make(n, h, v, seed=len(reduction) * 7 + int(ls * 100) + 3 * use_weight + use_bias)
    g = torch.Generator().manual_seed(5)
    grad = torch.randn(n, generator=g, dtype=torch.float64) if reduction == "none" else torch.tensor(0.8, dtype=torch.float64)
    ref = torch_reference(hidden, weight, target, bias=bias if use_bias else None,
                          class_weight=cw if use_weight else None, reduction=reduction, label_smoothing=ls,
                          z_loss=z, softcap=cap, grad=grad)
    opts = dict(reduction=reduction, label_smoothing=ls, z_loss=z, softcap=cap, accumulate="f64",
                bias=bias if use_bias else None, class_weight=cw if use_weight else None)
    prior = torch.randn(v, h, generator=g, dtype=torch.float64)
    d_weight = prior.clone()
    d_bias = torch.zeros(v, dtype=torch.float64)
    if fused:
        out = lmcore.linear_cross_entropy_with_grad(hidden, weight, target, grad_loss=grad, d_weight=d_weight,
                                                    d_bias=d_bias, chunk_size=8, **opts)
    else:
        out = lmcore.linear_cross_entropy_unfused_with_grad(hidden, weight, target, grad_loss=grad, d_weight=d_weight,
                                                            d_bias=d_bias, **opts)
    loss, zl, lse, d_hidden = (as_torch(t) for t in out)
    tol = dict(rtol=1e-10, atol=1e-12)
    check("loss", loss, ref["loss"], **tol)
    check("z_loss", zl, ref["z_loss"], **tol)
    check("lse", lse, ref["lse"], **tol)
    check("d_hidden", d_hidden, ref["d_hidden"], **tol)
    check("d_weight (added to prior)", d_weight - prior, ref["d_weight"], **tol)
    if use_bias:
        check("d_bias", d_bias, ref["d_bias"], **tol)


@pytest.mark.parametrize("chunk_size", [0, 1, 7, 64, 300])
def test_f32_default_accumulation_and_separate_backward(chunk_size):
    n, h, v = 33, 32, 300
    hidden, weight, bias, cw, target = make(n, h, v, seed=11, dtype=torch.float32)
    opts = dict(label_smoothing=0.1, z_loss=1e-4, softcap=15.0, class_weight=cw, bias=bias, chunk_size=chunk_size)
    ref = torch_reference(hidden.double(), weight.double(), target, bias=bias.double(), class_weight=cw.double(),
                          reduction="mean", label_smoothing=0.1, z_loss=1e-4, softcap=15.0,
                          grad=torch.tensor(1.0, dtype=torch.float64))
    loss, zl, lse = (as_torch(t) for t in lmcore.linear_cross_entropy(hidden, weight, target, **opts))
    d_weight = torch.zeros(v, h, dtype=torch.float32)
    d_bias = torch.zeros(v, dtype=torch.float32)
    d_hidden = as_torch(lmcore.linear_cross_entropy_backward(hidden, weight, target, 1.0, lse=lse, d_weight=d_weight,
                                                             d_bias=d_bias, **opts))
    tol = dict(rtol=2e-5, atol=2e-6)
    check("loss", loss, ref["loss"], **tol)
    check("lse", lse, ref["lse"], **tol)
    check("d_hidden", d_hidden, ref["d_hidden"], **tol)
    check("d_weight", d_weight, ref["d_weight"], **tol)
    check("d_bias", d_bias, ref["d_bias"], **tol)


def test_bf16_inputs_against_torch_f32():
    n, h, v = 40, 64, 257
    hidden, weight, bias, cw, target = make(n, h, v, seed=21, dtype=torch.bfloat16)
    ref = torch_reference(hidden.float(), weight.float(), target, bias=None, class_weight=None, reduction="mean",
                          label_smoothing=0.1, z_loss=1e-3, softcap=0.0, grad=torch.tensor(1.0))
    d_weight = torch.zeros(v, h, dtype=torch.float32)
    loss, zl, lse, d_hidden = (as_torch(t) for t in lmcore.linear_cross_entropy_with_grad(
        hidden, weight, target, d_weight=d_weight, label_smoothing=0.1, z_loss=1e-3, chunk_size=32))
    assert d_hidden.dtype == torch.bfloat16
    check("loss", loss, ref["loss"], rtol=1e-5, atol=1e-5)
    check("d_hidden", d_hidden, ref["d_hidden"], rtol=1 / 128, atol=1e-5)
    check("d_weight", d_weight, ref["d_weight"], rtol=1e-4, atol=1e-6)


def test_tied_module_adds_into_a_torch_gradient_in_place():
    n, h, v = 16, 8, 30
    hidden, weight, _, _, target = make(n, h, v, seed=31, dtype=torch.float32)
    embedding_grad = torch.randn(v, h)
    shared = embedding_grad.clone()
    mod = lmcore.LinearCrossEntropyLoss.tied(weight, shared, label_smoothing=0.05)
    assert not mod.owns_weight
    loss, _, _ = mod.forward(hidden, target)
    d_hidden = as_torch(mod.backward(1.0))
    ref = torch_reference(hidden, weight, target, bias=None, class_weight=None, reduction="mean",
                          label_smoothing=0.05, z_loss=0.0, softcap=0.0, grad=torch.tensor(1.0))
    check("loss", as_torch(loss), ref["loss"], rtol=1e-5, atol=1e-6)
    check("d_hidden", d_hidden, ref["d_hidden"], rtol=1e-5, atol=1e-6)
    check("shared d_weight", shared, embedding_grad + ref["d_weight"], rtol=1e-5, atol=1e-6)


def test_all_ignored_and_empty_and_bad_target():
    hidden, weight, _, _, target = make(5, 4, 6, seed=41, dtype=torch.float64)
    target[:] = IGNORE
    loss = as_torch(lmcore.linear_cross_entropy(hidden, weight, target)[0])
    assert torch.isnan(loss) and torch.isnan(F.cross_entropy(hidden @ weight.T, target))
    assert as_torch(lmcore.linear_cross_entropy(hidden, weight, target, reduction="sum")[0]).item() == 0.0
    empty = lmcore.linear_cross_entropy(hidden[:0], weight, target[:0], reduction="none")[0]
    assert tuple(empty.shape) == (0,)
    target[2] = 6
    with pytest.raises(lmcore.Error, match=r"target\[2\] = 6 is out of range.*< 6"):
        lmcore.linear_cross_entropy(hidden, weight, target)
    with pytest.raises(lmcore.Error, match="unknown option 'smoothing'"):
        lmcore.linear_cross_entropy(hidden, weight, target, smoothing=0.1)
