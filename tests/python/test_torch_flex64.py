# torch.autograd.gradcheck in float64 on lmcore.torch.flex_attention itself (lmcore's f64 kernels):
# gradients of query, key, value, of the returned lse, and of the score-modifier parameters (ALiBi
# slopes, relative-position tables, a trainable softcap), with block-sparse masks (sliding window,
# causal, block sizes that cut rows and columns into several blocks) and grouped-query attention.
#
# Tolerances: gradcheck compares the analytical Jacobian with central differences (eps 1e-6). In f64
# the differences carry ~1e-16 / 1e-6 = 1e-10 of rounding relative to the outputs and ~eps^2 = 1e-12
# of truncation, so atol 1e-8 and rtol 1e-6 (100x gradcheck's defaults tighter) leave a wide margin,
# and `test_one_percent_error_fails` shows that a gradient 1% off fails them for every kind of input.
# The forward values are also compared with torch's f64 attention within 16 f64 epsilons.
import pytest
import torch

import lmcore
import lmcore.torch as lt
from bounds import close_within
from test_attention import torch_attention

TOL = dict(eps=1e-6, atol=1e-8, rtol=1e-6)


def rand(*shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).requires_grad_()


def window(w):
    return lambda b, h, q_idx, kv_idx: (kv_idx <= q_idx) & (q_idx - kv_idx <= w)


def causal(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx


# (name, B, Hq, Hkv, L, S, D, Dv, mask_mod or None, BLOCK_SIZE, score modifier factory -> (ScoreMod, params))
# Block size 4 on L, S of 10-13: rows and columns of full, partial and empty blocks, short last blocks.
CASES = [
    ("dense", 1, 2, 2, 6, 7, 4, 3, None, 128, None),
    ("causal blocks", 2, 1, 1, 11, 11, 4, 4, causal, 4, None),
    ("sliding window GQA", 1, 4, 2, 12, 12, 4, 3, window(3), 4, None),
    ("alibi, window", 1, 2, 1, 10, 10, 3, 3, window(4), 4,
     lambda: (lambda s: (lt.alibi(s), [s]))(rand(2, seed=40, scale=0.5))),
    ("relative table, causal, GQA", 1, 4, 2, 10, 10, 3, 2, causal, 4,
     lambda: (lambda t: (lt.relative_position_bias(t), [t]))(rand(4, 7, seed=41, scale=0.5))),
    ("trainable softcap", 1, 2, 2, 9, 8, 4, 3, None, 128,
     lambda: (lambda c: (lt.softcap(c), [c]))(torch.tensor([0.7], dtype=torch.float64, requires_grad=True))),
    ("alibi, softcap, shared table, GQA, window", 1, 4, 2, 13, 13, 3, 3, window(5), 4,
     lambda: (lambda s, c, t: (lt.alibi(s).then(lt.softcap(c)).then(lt.relative_position_bias(t)), [s, c, t]))(
         rand(4, seed=42, scale=0.5), torch.tensor([1.3], dtype=torch.float64, requires_grad=True),
         rand(1, 5, seed=43, scale=0.5))),
]


def build(case):
    name, B, Hq, Hkv, L, S, D, Dv, mask_mod, block, factory = case
    q, k, v = rand(B, Hq, L, D, seed=1), rand(B, Hkv, S, D, seed=2), rand(B, Hkv, S, Dv, seed=3)
    bm = lt.create_block_mask(mask_mod, None, None, L, S, BLOCK_SIZE=block) if mask_mod is not None else None
    mod, params = factory() if factory is not None else (None, [])
    return q, k, v, bm, mod, params


def attention(bm, mod, gqa, n_params, perturb=None):
    """f(q, k, v, *params) -> (out, lse) for gradcheck; perturb (an index into the inputs) scales that
    input's gradient by 1.01 on its way back."""
    def f(*inputs):
        inputs = list(inputs)
        if perturb is not None:
            inputs[perturb] = _OnePercent.apply(inputs[perturb])
        q, k, v, *params = inputs
        m = mod
        if n_params:
            m = lt.ScoreMod([(kind, val if p is None else p)
                             for (kind, val), p in zip(mod._steps, _params_in_steps(mod, params))])
        return lt.flex_attention(q, k, v, score_mod=m, block_mask=bm, enable_gqa=gqa, return_lse=True)
    return f


def _params_in_steps(mod, params):
    """The parameter tensors given to f, placed at the chain steps that hold parameters (None elsewhere)."""
    it = iter(params)
    return [next(it) if kind in ("alibi", "rel") or isinstance(val, torch.Tensor) else None
            for kind, val in mod._steps]


class _OnePercent(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 1.01


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradcheck_f64(case):
    q, k, v, bm, mod, params = build(case)
    f = attention(bm, mod, q.shape[1] != k.shape[1], len(params))
    out, lse = f(q, k, v, *params)
    assert out.dtype == torch.float64 and lse.dtype == torch.float64
    # The forward against torch's f64 attention written out (bounds in f64 epsilons).
    B, Hq, L, _ = q.shape
    S = k.shape[2]
    mask = (lt.create_mask(case[8], 1, 1, L, S) if case[8] is not None else torch.ones(1, 1, L, S, dtype=torch.bool))
    ref_out, ref_lse = torch_attention(q.detach(), k.detach(), v.detach(), mask, mod)
    close_within(case[0] + " out", out, ref_out, torch.float64, 16)
    close_within(case[0] + " lse", lse, ref_lse, torch.float64, 4)
    assert torch.autograd.gradcheck(f, (q, k, v, *params), **TOL)


def test_gradcheck_lse_alone():
    # A loss on lse only (out unused): d lse / d s = P reaches q, k and the slopes, and v gets nothing.
    q, k, v, bm, mod, params = build(CASES[3])
    f = attention(bm, mod, True, len(params))
    assert torch.autograd.gradcheck(lambda *x: f(*x)[1], (q, k, v, *params), **TOL)
    _, lse = f(q, k, v, *params)
    (dv,) = torch.autograd.grad(lse.sum(), v, allow_unused=True)
    assert dv is None or torch.count_nonzero(dv) == 0


def test_gradcheck_python_callable_score_mod():
    # A Python score_mod with PyTorch's signature: evaluated per element in f64, its derivative by autograd.
    q, k, v = rand(1, 2, 6, 3, seed=5), rand(1, 2, 6, 3, seed=6), rand(1, 2, 6, 2, seed=7)
    bm = lt.create_block_mask(causal, None, None, 6, 6, BLOCK_SIZE=4)

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.tanh(score) * 1.5 + 0.1 * (q_idx - kv_idx) / 3

    def f(q, k, v):
        return lt.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, return_lse=True)
    assert torch.autograd.gradcheck(f, (q, k, v), **TOL)


def test_one_percent_error_fails():
    # Each input's gradient scaled by 1.01 (an identity whose backward is 1% off) fails the same check:
    # q, k, v, slopes, cap and table in the chained case, and through lse alone.
    case = CASES[6]
    q, k, v, bm, mod, params = build(case)
    inputs = (q, k, v, *params)
    for i in range(len(inputs)):
        f = attention(bm, mod, True, len(params), perturb=i)
        assert not torch.autograd.gradcheck(f, inputs, raise_exception=False, **TOL), f"input {i}"
        assert not torch.autograd.gradcheck(lambda *x: f(*x)[1], inputs, raise_exception=False, **TOL) or i == 2, \
            f"input {i} (lse)"
    # And the unperturbed check passes on the same inputs.
    assert torch.autograd.gradcheck(attention(bm, mod, True, len(params)), inputs, **TOL)


def test_f64_matches_f32_path_on_f32_values():
    # The same problem in f32 and f64 (f32-representable values): the f32 path is within its own f32
    # bounds of the f64 path, and the f64 path keeps its table in f64 (a change below f32's resolution
    # moves the f64 result).
    q, k, v, bm, mod, params = build(CASES[4])
    q32, k32, v32 = (x.detach().float() for x in (q, k, v))
    t64 = params[0].detach().clone() + 1e-9  # below f32's resolution at these magnitudes
    out64 = lt.flex_attention(q32.double(), k32.double(), v32.double(), score_mod=lt.relative_position_bias(t64),
                              block_mask=bm, enable_gqa=True)
    out64b = lt.flex_attention(q32.double(), k32.double(), v32.double(),
                               score_mod=lt.relative_position_bias(t64 - 1e-9), block_mask=bm, enable_gqa=True)
    out32 = lt.flex_attention(q32, k32, v32, score_mod=lt.relative_position_bias(t64.float()), block_mask=bm,
                              enable_gqa=True)
    assert not torch.equal(out64, out64b)
    close_within("f32 path vs f64 path", out32, out64, torch.float32, 16)


def test_f64_gradients_are_f64_and_deterministic():
    q, k, v, bm, mod, params = build(CASES[6])
    grads = []
    for _ in range(2):
        xs = [x.detach().clone().requires_grad_() for x in (q, k, v, *params)]
        f = attention(bm, mod, True, len(params))
        out, lse = f(*xs)
        (out.sum() + lse.sum()).backward()
        grads.append([x.grad for x in xs])
    for a, b in zip(*grads):
        assert a.dtype == torch.float64 and torch.equal(a, b)


def test_f64_argument_errors():
    q, k, v = rand(1, 2, 4, 3, seed=8), rand(1, 2, 4, 3, seed=9), rand(1, 2, 4, 3, seed=10)
    with pytest.raises(TypeError, match="query, key, value: expected one dtype"):
        lt.flex_attention(q, k.float(), v)
    # lmcore's own backward refuses an lse of the wrong dtype for f64 inputs, naming it.
    out, lse = lmcore.flex_attention(*(lmcore.from_numpy(x.detach().numpy()) for x in (q, k, v)), return_lse=True)
    assert lse.dtype == "f64"
    with pytest.raises(lmcore.Error, match=r"'lse' must be f64 of shape \[1, 2, 4\]"):
        lmcore.flex_attention_backward(*(lmcore.from_numpy(x.detach().numpy()) for x in (q, k, v)), out,
                                       lse.to("f32"), out)


def test_gradcheck_value_dim_256_with_lse():
    # A gradient on lse goes to the kernel as d_lse (it used to ride on a spare value column, which made
    # value head dim 256, the kernels' limit, an error whenever lse had a gradient).
    q, k, v = rand(1, 2, 3, 2, seed=11), rand(1, 1, 5, 2, seed=12), rand(1, 1, 5, 256, seed=13)
    bm = lt.create_block_mask(causal, None, None, 3, 5, BLOCK_SIZE=2)

    def f(q, k, v):
        return lt.flex_attention(q, k, v, block_mask=bm, enable_gqa=True, return_lse=True)
    assert torch.autograd.gradcheck(f, (q, k, v), **TOL)


def test_lse_gradient_value_dim_256_f32():
    # The f32 path, same case shape as the f64 one above but larger: against torch's f64 autograd.
    g = torch.Generator().manual_seed(20)
    q, k, v = (torch.randn(*s, generator=g) for s in ((1, 4, 40, 16), (1, 2, 40, 16), (1, 2, 40, 256)))
    d_out, d_lse = torch.randn(1, 4, 40, 256, generator=g), torch.randn(1, 4, 40, generator=g)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], requires_grad=True)
    bm = lt.create_block_mask(window(7), None, None, 40, 40, BLOCK_SIZE=16)
    tq, tk, tv = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = lt.flex_attention(tq, tk, tv, score_mod=lt.alibi(slopes), block_mask=bm, enable_gqa=True,
                                 return_lse=True)
    ((out * d_out).sum() + (lse * d_lse).sum()).backward()
    rq, rk, rv = (x.double().requires_grad_() for x in (q, k, v))
    rs = slopes.detach().double().requires_grad_()
    ref_out, ref_lse = torch_attention(rq, rk, rv, lt.create_mask(window(7), 1, 1, 40, 40), lt.alibi(rs))
    ((ref_out * d_out.double()).sum() + (ref_lse * d_lse.double()).sum()).backward()
    for name, got, want in (("dq", tq.grad, rq.grad), ("dk", tk.grad, rk.grad), ("dv", tv.grad, rv.grad)):
        close_within("Dv 256 + lse " + name, got, want, torch.float32, 16)
    close_within("Dv 256 + lse slopes", slopes.grad, rs.grad, torch.float32, 64)
