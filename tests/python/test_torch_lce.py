# lmcore.torch.linear_cross_entropy and LinearCrossEntropyLoss: autograd against torch 1.13's
# F.linear + F.cross_entropy (+ z-loss and softcap written out in torch), every reduction, any incoming
# gradient, any leading shape, torch.autograd.gradcheck in f64, weight tying, and argument errors.
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lmcore.torch as lt
from bounds import close_within

# Bounds in eps(dtype) (a max|want| + r |want|) as in test_loss_lce.py (measured there: f32 loss 0.17,
# d_hidden 7.0, d_weight 2.0, d_bias 2.2 eps max|want|); each rejects a 1% error (bounds.py checks it).
LOSS, GRAD = (8, 0), (16, 0)


def reference(x, w, t, *, b=None, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0,
              z_loss=0.0, softcap=None):
    """Plain torch: logits, softcap, F.cross_entropy and the z-loss (a mean over counted tokens)."""
    logits = F.linear(x, w, b).reshape(-1, w.shape[0])
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    tf = t.reshape(-1)
    ce = F.cross_entropy(logits, tf, weight=weight, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing)
    counted = tf != ignore_index
    zl = z_loss * torch.logsumexp(logits, -1).square() * counted
    if reduction == "none":
        return (ce + zl).reshape(t.shape)
    return ce + (zl.sum() if reduction == "sum" else zl.sum() / counted.sum())


def make(lead, h, v, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, h, generator=g, dtype=torch.float64).to(dtype)
    w = (0.5 * torch.randn(v, h, generator=g, dtype=torch.float64)).to(dtype)
    b = (0.3 * torch.randn(v, generator=g, dtype=torch.float64)).to(dtype)
    cw = (0.2 + 1.8 * torch.rand(v, generator=g, dtype=torch.float64)).to(dtype)
    t = torch.randint(0, v, lead, generator=g)
    t.view(-1)[1::4] = -100
    return x, w, b, cw, t


OPTIONS = [dict(), dict(label_smoothing=0.1, z_loss=1e-2, softcap=3.0), dict(weight=True, label_smoothing=0.2)]


@pytest.mark.parametrize("reduction,opts", list(itertools.product(["mean", "sum", "none"], OPTIONS)))
def test_gradcheck_f64_every_reduction(reduction, opts):
    x, w, b, cw, t = make((2, 3), 5, 7, torch.float64, seed=1)
    opts = dict(opts)
    if opts.pop("weight", False):
        opts["weight"] = cw
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()

    def f(x, w, b):
        return lt.linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction, **opts)

    assert torch.autograd.gradcheck(f, (x, w, b), eps=1e-6, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lead", [(6,), (2, 3, 5), (0,)])
def test_f32_matches_torch_with_any_incoming_gradient(reduction, lead):
    x, w, b, cw, t = make(lead, 16, 37, torch.float32, seed=len(lead) * 3 + len(reduction))
    opts = dict(weight=cw, label_smoothing=0.1, z_loss=1e-3, softcap=5.0, reduction=reduction)
    g = torch.Generator().manual_seed(9)
    grad = torch.randn(lead, generator=g) if reduction == "none" else torch.tensor(-1.7)
    got_x, got_w, got_b = (p.clone().requires_grad_() for p in (x, w, b))
    loss = lt.linear_cross_entropy(got_x, got_w, t, linear_bias=got_b, **opts)
    assert loss.dtype == torch.float32 and loss.shape == (lead if reduction == "none" else ())
    loss.backward(grad)
    want_x, want_w, want_b = (p.double().requires_grad_() for p in (x, w, b))
    want = reference(want_x, want_w, t, b=want_b, **dict(opts, weight=cw.double()))
    want.backward(grad.double())
    if not (reduction == "mean" and lead == (0,)):  # mean of nothing is NaN on both sides
        close_within("loss", loss, want, torch.float32, *LOSS)
    else:
        assert torch.isnan(loss) and torch.isnan(want)
        return
    close_within("d_input", got_x.grad, want_x.grad, torch.float32, *GRAD)
    close_within("d_linear_weight", got_w.grad, want_w.grad, torch.float32, *GRAD)
    close_within("d_linear_bias", got_b.grad, want_b.grad, torch.float32, *GRAD)


def test_a_non_contiguous_expanded_gradient_for_none():
    x, w, _, _, t = make((4, 6), 8, 11, torch.float32, seed=3)
    x.requires_grad_()
    loss = lt.linear_cross_entropy(x, w, t, reduction="none")
    (loss * torch.arange(6.0)).sum().backward()  # gradient [4, 6] with stride 0 along dim 0
    xr = x.detach().double().requires_grad_()
    (reference(xr, w.double(), t, reduction="none") * torch.arange(6.0, dtype=torch.float64)).sum().backward()
    close_within("d_input", x.grad, xr.grad, torch.float32, *GRAD)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_returns_the_input_dtype(dtype):
    x, w, _, _, t = make((3, 8), 32, 50, dtype, seed=4)
    x.requires_grad_(), w.requires_grad_()
    loss = lt.linear_cross_entropy(x, w, t)
    assert loss.dtype == dtype
    loss.backward()
    assert x.grad.dtype == dtype and w.grad.dtype == dtype
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    reference(xr, wr, t).backward()
    # f32 sums of exact products, each result rounded once to the input dtype (on oneDNN's bf16 path
    # d_logits are rounded to bf16 first: 5/8 eps max|want| as in test_loss_lce.py).
    close_within("loss", loss, reference(xr, wr, t), dtype, 0, 0.5 + 1e-3)
    close_within("d_input", x.grad, xr.grad, dtype, 5 / 8, 0.5)
    close_within("d_linear_weight", w.grad, wr.grad, dtype, 3 / 8, 0.5)


def test_module_holds_its_parameter_and_ties_to_an_embedding():
    torch.manual_seed(0)
    H, V = 12, 40
    mod = lt.LinearCrossEntropyLoss(H, V, bias=True, z_loss=1e-3, label_smoothing=0.05)
    names = dict(mod.named_parameters())
    assert set(names) == {"linear_weight", "linear_bias"} and names["linear_weight"].shape == (V, H)
    bound = 1 / H ** 0.5  # nn.Linear's initialisation
    assert 0 < mod.linear_weight.abs().max() <= bound and 0 < mod.linear_bias.abs().max() <= bound
    emb = nn.Embedding(V, H)
    mod.linear_weight = emb.weight  # tied: one parameter, two uses
    assert [n for n, _ in mod.named_parameters()] == ["linear_weight", "linear_bias"]
    ids = torch.randint(0, V, (3, 9))
    target = torch.randint(0, V, (3, 9))
    mod(emb(ids) * 2.0, target).backward()
    got = emb.weight.grad.clone()
    ref_w = emb.weight.detach().double().requires_grad_()
    x = F.embedding(ids, ref_w) * 2.0
    reference(x, ref_w, target, b=mod.linear_bias.detach().double(), z_loss=1e-3, label_smoothing=0.05).backward()
    close_within("tied d_weight (embedding + projection)", got, ref_w.grad, torch.float32, *GRAD)


def test_all_ignored_tokens():
    x, w, _, _, t = make((5,), 4, 6, torch.float64, seed=41)
    t[:] = -100
    x.requires_grad_()
    assert torch.isnan(lt.linear_cross_entropy(x, w, t, z_loss=0.0))  # torch's 0/0
    s = lt.linear_cross_entropy(x, w, t, reduction="sum", z_loss=0.0)
    s.backward()
    assert s.item() == 0.0 and torch.equal(x.grad, torch.zeros_like(x))


def test_argument_errors_name_the_argument():
    x, w, b, cw, t = make((4,), 8, 10, torch.float32, seed=5)
    cases = [
        (dict(input=x.double()), TypeError, r"linear_weight: expected the dtype of input \(torch.float64\)"),
        (dict(linear_weight=w[:, :5]), ValueError, r"linear_weight: expected shape \[V, 8\].*found \[10, 5\]"),
        (dict(target=t[:3]), ValueError, r"target: expected shape \[4\].*found \[3\]"),
        (dict(target=t.float()), TypeError, r"target: expected dtype int64"),
        (dict(input=x.int()), TypeError, r"input: expected dtype float32, float64, bfloat16, float16, found int32"),
        (dict(reduction="avg"), ValueError, r"reduction: expected one of 'mean', 'sum', 'none', found 'avg'"),
        (dict(linear_bias=b[:3]), ValueError, r"linear_bias: expected shape \[10\], found \[3\]"),
        (dict(weight=cw[:3]), ValueError, r"weight: expected shape \[10\] \(one weight per class\), found \[3\]"),
        (dict(softcap=0.0), ValueError, r"softcap: expected None or a number > 0, found 0.0"),
        (dict(label_smoothing=1.5), ValueError, r"label_smoothing: expected a number in \[0, 1\], found 1.5"),
        (dict(input=[1.0]), TypeError, r"input: expected a torch.Tensor, found list"),
    ]
    for change, exc, msg in cases:
        args = dict(input=x, linear_weight=w, target=t)
        args.update(change)
        kw = {k: v for k, v in args.items() if k not in ("input", "linear_weight", "target")}
        with pytest.raises(exc, match=msg):
            lt.linear_cross_entropy(args["input"], args["linear_weight"], args["target"], **kw)
    t2 = t.clone()
    t2[1] = 10
    with pytest.raises(ValueError, match=r"target\[1\] = 10 is out of range"):
        lt.linear_cross_entropy(x, w, t2)


def test_mean_and_sum_compute_gradients_in_the_forward_only_when_wanted():
    # With gradients wanted, "mean"/"sum" take the one-pass forward + backward; under no_grad (or with no
    # input requiring grad) a forward only. Same loss either way; backward twice scales the same gradients.
    x, w, _, _, t = make((3, 4), 8, 21, torch.float32, seed=6)
    with torch.no_grad():
        plain = lt.linear_cross_entropy(x, w, t, reduction="sum")
    xr = x.clone().requires_grad_()
    fused = lt.linear_cross_entropy(xr, w, t, reduction="sum")
    assert torch.equal(plain, fused.detach()) or abs(plain.item() - fused.item()) <= 8 * 2.0 ** -23 * abs(plain.item())
    fused.backward(torch.tensor(2.0), retain_graph=True)
    first = xr.grad.clone()
    fused.backward(torch.tensor(-1.0))
    close_within("two backward calls (the second recomputed)", xr.grad, first * 0.5, torch.float32, *GRAD)


def test_zero_hidden_size():
    # H = 0: every logit is 0 (no bias), the loss is log V, the gradients are empty.
    x, w = torch.randn(3, 0, requires_grad=True), torch.randn(5, 0, requires_grad=True)
    loss = lt.linear_cross_entropy(x, w, torch.zeros(3, dtype=torch.long))
    loss.backward()
    assert abs(loss.item() - torch.log(torch.tensor(5.0)).item()) <= 4 * 2.0 ** -23
    assert x.grad.shape == (3, 0) and w.grad.shape == (5, 0)
