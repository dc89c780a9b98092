"""Each layer of lmcore's model (lmcore.layers) against torch 1.13 autograd in f64, on f32 and on
bf16-rounded inputs (what the bf16 compute mode feeds them). Bounds are normwise, max|err| / max|ref|,
in f32 epsilons: the measured errors over every size here are at most 1.6 eps (rmsnorm), 0.9 eps (rope)
and 2.7 eps (swiglu); the bound is 16 eps (1.9e-6), 5000x below a 1% error, which the last assertions
of each test check fails."""
import numpy as np
import pytest
import torch

import lmcore

EPS = 2.0 ** -23
BOUND = 16 * EPS


def t(x):
    return torch.utils.dlpack.from_dlpack(x) if not isinstance(x, torch.Tensor) else x


def rel(got, want, scale=None):
    """max |got - want| over max |want| (or over `scale` when the result cancels below its terms)."""
    got, want = t(got).double(), want.double()
    s = want.abs().max() if scale is None else torch.tensor(scale, dtype=torch.float64)
    return ((got - want).abs().max() / s.clamp_min(1e-300)).item()


def inputs(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * scale
    return x.to(dtype).float()  # bf16: rounded values, handed to the layer as f32 (as the model does)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("N,C", [(1, 1), (3, 7), (17, 64), (33, 385)])
def test_rmsnorm(dtype, N, C):
    x, w, dy = inputs((N, C), dtype, 1, 3.0), inputs((C,), dtype, 2), inputs((N, C), dtype, 3)
    out, rstd = lmcore.layers.rmsnorm_forward(x, w, 1e-5)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * wd
    ref.backward(dy.double())
    assert rel(out, ref.detach()) <= BOUND
    dx, dw = lmcore.layers.rmsnorm_backward(dy, x, w, rstd)
    # dx = r w dy - (r^3 / C) x sum(w dy x): the two terms cancel (entirely at C = 1), so the error is
    # judged against the first term's size.
    terms = max(xd.grad.abs().max().item(), (t(rstd).double().view(-1, 1) * w.double() * dy.double()).abs().max().item())
    assert rel(dx, xd.grad, terms) <= BOUND
    assert rel(dw, wd.grad) <= BOUND * max(1.0, np.sqrt(N) / 4)  # a sum over N rows
    if C > 1:
        assert rel(t(dx) * 1.01, xd.grad, terms) > BOUND
    assert rel(t(dw) * 1.01, wd.grad) > BOUND


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hd", [2, 8, 64, 128])
def test_rope(dtype, hd):
    B, T, H, heads = 2, 40, 5, 3
    x, dy = inputs((B, T, H, hd), dtype, 4), inputs((B, T, H, hd), dtype, 5)
    out = lmcore.layers.rope_forward(x, heads, 10000.0)
    # torch: the same f32 angles (as transformers computes them), the rotation in f64.
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    cos = torch.cat([ang, ang], -1).cos().double().view(1, T, 1, hd)
    sin = torch.cat([ang, ang], -1).sin().double().view(1, T, 1, hd)
    xd = x.double().requires_grad_()
    h = hd // 2
    rot = torch.cat([-xd[..., h:], xd[..., :h]], -1)
    ref = torch.cat([(xd * cos + rot * sin)[:, :, :heads], xd[:, :, heads:]], 2)
    ref.backward(dy.double())
    assert rel(out, ref.detach()) <= BOUND
    dx = lmcore.layers.rope_backward(dy, heads, 10000.0)
    assert rel(dx, xd.grad) <= BOUND
    assert rel(t(dx) * 0.99, xd.grad) > BOUND


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("N,F", [(1, 1), (5, 17), (16, 256)])
def test_swiglu(dtype, N, F):
    gu, dy = inputs((N, 2 * F), dtype, 6, 4.0), inputs((N, F), dtype, 7)
    out = lmcore.layers.swiglu_forward(gu)
    gd = gu.double().requires_grad_()
    ref = torch.nn.functional.silu(gd[:, :F]) * gd[:, F:]
    ref.backward(dy.double())
    assert rel(out, ref.detach()) <= BOUND
    dgu = lmcore.layers.swiglu_backward(dy, gu)
    # d gate cancels near silu' = 0: judged against the whole gradient's scale, as everywhere here.
    assert rel(dgu, gd.grad) <= BOUND
    assert rel(t(dgu) * 1.01, gd.grad) > BOUND


def test_layer_errors_name_the_argument():
    with pytest.raises(ValueError, match="weight has 3 elements, expected 4"):
        lmcore.layers.rmsnorm_forward(np.ones((2, 4), np.float32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="even number of columns"):
        lmcore.layers.swiglu_forward(np.ones((2, 5), np.float32))
    with pytest.raises(ValueError, match="heads must be in"):
        lmcore.layers.rope_forward(np.ones((1, 2, 2, 4), np.float32), 3)
