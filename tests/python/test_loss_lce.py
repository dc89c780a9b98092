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
from bounds import close_within

IGNORE = -100

# Bounds in units of the result dtype's epsilon, (a, r): |diff| <= eps (a max|want| + r |want|), each shown
# to reject a 1% error (tests/python/bounds.py). Measured with LMCORE_TEST_REPORT_ERRORS=1 python3 -m
# pytest tests/python/test_loss_lce.py -s (Xeon, 2 threads), in eps max|want|:
#   f64 against torch (fused and unfused, every option): loss, z_loss 2.0 (8, 0), lse 0.79 (4, 0),
#       d_hidden 4.0, d_weight 1.7 (against prior + gradient, (4, 0)), d_bias 2.7 (16, 0)
#   f32: loss 0.17, lse 0.82, d_hidden 7.0, d_weight 2.0, d_bias 2.2
#   bf16 inputs: loss 0.11, lse 0.39 (f32), d_hidden 0.20 (bf16, (1/64, 1/2): 82% of it), d_weight 2.4 (f32)
#   f16 inputs: loss 0.38, lse 0.79, d_hidden 0.35 (f16, (1/8, 1/2): 64% of it), d_weight 2.4
#   tied module: loss 0.12, d_hidden 1.6, shared d_weight 0.31 (4, 0), the part added to it 3.0
# Before: f64 1e-10 |want| + 1e-12 (~450000 eps), f32 2e-5 |want| + 2e-6, bf16 d_hidden 1/128 |want|
# (twice its rounding), the tied module 1e-5 |want| + 1e-6.
LOSS, LSE, GRAD = (8, 0), (4, 0), (16, 0)


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
    f64 = torch.float64
    close_within("f64 loss", loss, ref["loss"], f64, *LOSS)
    if z:
        close_within("f64 z_loss", zl, ref["z_loss"], f64, *LOSS)
    close_within("f64 lse", lse, ref["lse"], f64, *LSE)
    close_within("f64 d_hidden", d_hidden, ref["d_hidden"], f64, *GRAD)
    # Added into the prior contents: against prior + the gradient (1.7 eps measured). The gradient part on
    # its own costs the subtraction of a prior up to ~4x larger: 11.8 eps measured, bound 32.
    close_within("f64 d_weight (prior + gradient)", d_weight, prior + ref["d_weight"], f64, 4, 0)
    close_within("f64 d_weight (added part)", d_weight - prior, ref["d_weight"], f64, 32, 0)
    if use_bias:
        close_within("f64 d_bias", d_bias, ref["d_bias"], f64, *GRAD)


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
    f32 = torch.float32
    close_within("f32 loss", loss, ref["loss"], f32, *LOSS)
    close_within("f32 lse", lse, ref["lse"], f32, *LSE)
    close_within("f32 d_hidden", d_hidden, ref["d_hidden"], f32, *GRAD)
    close_within("f32 d_weight", d_weight, ref["d_weight"], f32, *GRAD)
    close_within("f32 d_bias", d_bias, ref["d_bias"], f32, *GRAD)


@pytest.mark.parametrize("dtype,onednn", [(torch.bfloat16, True), (torch.bfloat16, False), (torch.float16, True)])
def test_low_precision_inputs_against_torch_f64(dtype, onednn):
    lmcore.set_lowp_gemm_onednn(onednn)
    try:
        check_low_precision_inputs(dtype)
    finally:
        lmcore.set_lowp_gemm_onednn(True)


def check_low_precision_inputs(dtype):
    n, h, v = 40, 64, 257
    hidden, weight, bias, cw, target = make(n, h, v, seed=21, dtype=dtype)
    ref = torch_reference(hidden.double(), weight.double(), target, bias=None, class_weight=None, reduction="mean",
                          label_smoothing=0.1, z_loss=1e-3, softcap=0.0, grad=torch.tensor(1.0, dtype=torch.float64))
    d_weight = torch.zeros(v, h, dtype=torch.float32)
    loss, zl, lse, d_hidden = (as_torch(t) for t in lmcore.linear_cross_entropy_with_grad(
        hidden, weight, target, d_weight=d_weight, label_smoothing=0.1, z_loss=1e-3, chunk_size=32))
    assert d_hidden.dtype == dtype
    # The same values in f64 on torch's side: f32 arithmetic on exact products, d_hidden rounded once
    # to the input dtype (half an ulp; f16's epsilon is 8x smaller than bf16's, and so is its bound).
    name = str(dtype)[6:]
    close_within(f"{name} loss", loss, ref["loss"], torch.float32, *LOSS)
    close_within(f"{name} lse", lse, ref["lse"], torch.float32, *LSE)
    if dtype == torch.bfloat16 and lmcore.lowp_gemm_path("bf16") == "onednn":
        # On the matrix units d_logits enter the two gradient products rounded to bf16 (the products
        # take bf16 operands; their sums stay f32): bounds in bf16's epsilon, measured 0.37 (d_hidden)
        # and 0.27 (d_weight, f32 sums) eps max|want|; bounds 5/8 (d_hidden is itself rounded to bf16)
        # and 3/8, r = 0, each rejecting a 1% error.
        close_within(f"{name} d_hidden", d_hidden, ref["d_hidden"], dtype, 5 / 8, 0)
        close_within(f"{name} d_weight", d_weight, ref["d_weight"], dtype, 3 / 8, 0)
        return
    close_within(f"{name} d_hidden", d_hidden, ref["d_hidden"], dtype, 1 / 64 if dtype == torch.bfloat16 else 1 / 8, 0.5)
    close_within(f"{name} d_weight", d_weight, ref["d_weight"], torch.float32, *GRAD)


def test_tied_module_adds_into_a_torch_gradient_in_place():
    n, h, v = 16, 8, 30
    hidden, weight, _, _, target = make(n, h, v, seed=31, dtype=torch.float32)
    embedding_grad = torch.randn(v, h)
    shared = embedding_grad.clone()
    mod = lmcore.LinearCrossEntropyLoss.tied(weight, shared, label_smoothing=0.05)
    assert not mod.owns_weight
    loss, _, _ = mod.forward(hidden, target)
    d_hidden = as_torch(mod.backward(1.0))
    ref = torch_reference(hidden.double(), weight.double(), target, bias=None, class_weight=None, reduction="mean",
                          label_smoothing=0.05, z_loss=0.0, softcap=0.0, grad=torch.tensor(1.0, dtype=torch.float64))
    f32 = torch.float32
    close_within("tied loss", as_torch(loss), ref["loss"], f32, *LOSS)
    close_within("tied d_hidden", d_hidden, ref["d_hidden"], f32, *GRAD)
    close_within("tied shared d_weight", shared, embedding_grad.double() + ref["d_weight"], f32, 4, 0)
    close_within("tied added d_weight", shared.double() - embedding_grad.double(), ref["d_weight"], f32, *GRAD)


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
