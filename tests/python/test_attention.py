"""flex attention, its backward and sdpa through the Python module, against masked softmax attention
written out in torch 1.13 (float64, autograd for the gradients)."""
import math

import numpy as np
import pytest
import torch
import torch.utils.dlpack

import lmcore
from bounds import close_within

# Bounds per result dtype in units of its epsilon, (a, r): |diff| <= eps (a max|want| + r |want|) (see
# tests/python/bounds.py); lse and the score-mod parameter gradients are f32 whatever the inputs. In
# bf16/f16 r = 1/2 is the final rounding of each element; the rest is f32 arithmetic. Measured with
# LMCORE_TEST_REPORT_ERRORS=1 python3 -m pytest tests/python/test_attention.py -s (Xeon, 2 threads):
#   f32: out <= 4.6 (sdpa, dense: an average of values up to 3x max|out|), lse <= 0.9, dq/dk/dv <= 5.4,
#        score-mod tables <= 4.7 eps max|want|
#   bf16: out 0.23, dq/dk/dv <= 0.33 eps max|want| (worst element 91% of the bound);  f16: <= 0.39 (69%)
#   bf16 on the matrix units (oneDNN; P and dS rounded to bf16 before their products, as FlashAttention):
#        out 0.25, dq/dk/dv <= 0.52 eps max|want| against (5/8, 0) (worst element 83%): one a covers the
#        final rounding too, since r = 1/2 on top would let a 1% error at the largest element pass
# Each comparison also shows that a 1% error fails.
BOUNDS = {
    torch.float32: dict(out=(16, 0), lse=(4, 0), grad=(16, 0), param=(64, 0)),
    torch.bfloat16: dict(out=(1 / 64, 0.5), lse=(4, 0), grad=(1 / 64, 0.5), param=(64, 0)),
    torch.float16: dict(out=(1 / 8, 0.5), lse=(4, 0), grad=(1 / 8, 0.5), param=(64, 0)),
}


def to_torch(t):
    return torch.utils.dlpack.from_dlpack(t)


def torch_attention(q, k, v, mask, score_fn=None, scale=None):
    """q [B, Hq, L, D], k/v [B, Hkv, S, *] (float64, requires_grad); mask bool broadcastable to [B, Hq, L, S]."""
    B, Hq, L, D = q.shape
    S = k.shape[2]
    group = Hq // k.shape[1]
    kk = k.repeat_interleave(group, dim=1)
    vv = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = (q @ kk.transpose(-1, -2)) * scale
    if score_fn is not None:
        b = torch.arange(B).view(B, 1, 1, 1)
        h = torch.arange(Hq).view(1, Hq, 1, 1)
        qi = torch.arange(L).view(1, 1, L, 1)
        ki = torch.arange(S).view(1, 1, 1, S)
        s = score_fn(s, b, h, qi, ki)
    mask = mask.expand(B, Hq, L, S)
    has = mask.any(-1, keepdim=True)
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    # Rows with nothing allowed: zero output (softmax of a zero row, multiplied away) and no NaN.
    p = torch.softmax(torch.where(has, s, torch.zeros_like(s)), -1) * has
    return p @ vv, lse


def grid(L, S):
    return torch.arange(L).view(L, 1), torch.arange(S).view(1, S)


def docs(n, length):
    return [i // length for i in range(n)]


MASKS = {
    "causal": (lambda: lmcore.MaskMod.causal(), lambda q, kv: kv <= q),
    "sliding_window": (lambda: lmcore.MaskMod.sliding_window(13), lambda q, kv: (kv <= q) & (q - kv <= 13)),
    "prefix_lm": (lambda: lmcore.MaskMod.prefix_lm(9), lambda q, kv: (kv < 9) | (kv <= q)),
    "document": (lambda: lmcore.MaskMod.document(docs(64, 11)),
                 lambda q, kv: torch.tensor(docs(64, 11))[q] == torch.tensor(docs(64, 11))[kv]),
    "chunked": (lambda: lmcore.MaskMod.chunked(16), lambda q, kv: q // 16 == kv // 16),
    "causal&document": (lambda: lmcore.MaskMod.causal() & lmcore.MaskMod.document(docs(64, 20)),
                        lambda q, kv: (kv <= q) & (torch.tensor(docs(64, 20))[q] == torch.tensor(docs(64, 20))[kv])),
    "~causal|window": (lambda: ~lmcore.MaskMod.causal() | lmcore.MaskMod.sliding_window(2),
                       lambda q, kv: (kv > q) | ((kv <= q) & (q - kv <= 2))),
    "python callable": (lambda: (lambda b, h, q, kv: (q + kv) % 3 != 0 and kv <= q + 5),
                        lambda q, kv: ((q + kv) % 3 != 0) & (kv <= q + 5)),
}


def random_inputs(B, Hq, Hkv, L, S, D, Dv, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, L, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, Dv, generator=g).to(dtype)
    d_out = torch.randn(B, Hq, L, Dv, generator=g).to(dtype)
    return q, k, v, d_out


def run_and_compare(q, k, v, d_out, mask_mod, torch_mask, score_mod=None, torch_score=None, block=16,
                    backward=True, scale=None, name=""):
    B, Hq, L, _ = q.shape
    S = k.shape[2]
    bounds = BOUNDS[q.dtype]
    bm = lmcore.create_block_mask(mask_mod, 1, 1, L, S, block, block)
    out, lse = lmcore.flex_attention(q, k, v, block_mask=bm, score_mod=score_mod, return_lse=True,
                                     scale=scale or 0.0)
    out, lse = to_torch(out), to_torch(lse)
    assert out.dtype == q.dtype and lse.dtype == torch.float32
    qi, ki = grid(L, S)
    tq, tk, tv = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref_out, ref_lse = torch_attention(tq, tk, tv, torch_mask(qi, ki), torch_score, scale)
    assert not torch.isnan(out.float()).any()
    close_within(f"{name} out", out, ref_out, q.dtype, *bounds["out"])
    close_within(f"{name} lse", lse, ref_lse, torch.float32, *bounds["lse"])
    if not backward:
        return
    ref_out.backward(d_out.double())
    dq, dk, dv = (to_torch(x) for x in lmcore.flex_attention_backward(
        q, k, v, to_torch(lmcore.as_tensor(out)), lse, d_out, block_mask=bm, score_mod=score_mod, scale=scale or 0.0))
    for gname, got, want in (("dq", dq, tq.grad), ("dk", dk, tk.grad), ("dv", dv, tv.grad)):
        assert got.dtype == q.dtype, gname
        assert not torch.isnan(got.float()).any(), gname
        close_within(f"{name} {gname}", got, want, q.dtype, *bounds["grad"])


@pytest.mark.parametrize("name", list(MASKS))
def test_flex_masks_match_torch(name):
    make, torch_mask = MASKS[name]
    q, k, v, d_out = random_inputs(2, 4, 2, 45, 64, 16, 8, seed=len(name))
    run_and_compare(q, k, v, d_out, make(), torch_mask, name=name)


def test_flex_lengths_below_one_block_and_gqa():
    q, k, v, d_out = random_inputs(1, 6, 3, 5, 9, 32, 24, seed=3)
    run_and_compare(q, k, v, d_out, lmcore.MaskMod.causal(), lambda qq, kv: kv <= qq, block=128, name="gqa short")


def test_flex_score_mods_match_torch():
    q, k, v, d_out = random_inputs(1, 4, 2, 40, 40, 16, 16, seed=9)
    slopes = lmcore.ScoreMod.alibi_slopes(4)
    t_slopes = torch.tensor(slopes, dtype=torch.float64).view(1, 4, 1, 1)
    causal = lambda qq, kv: kv <= qq
    run_and_compare(q, k, v, d_out, lmcore.MaskMod.causal(), causal, lmcore.ScoreMod.alibi(slopes),
                    lambda s, b, h, qq, kv: s + t_slopes * (kv - qq), name="alibi")
    run_and_compare(q, k, v, d_out, lmcore.MaskMod.all(), lambda qq, kv: torch.ones_like(qq + kv, dtype=torch.bool),
                    lmcore.ScoreMod.softcap(1.5), lambda s, b, h, qq, kv: 1.5 * torch.tanh(s / 1.5), scale=0.8, name="softcap")
    R = 5
    bias = np.linspace(-1, 1, 2 * R + 1, dtype=np.float32)
    tb = torch.tensor(bias, dtype=torch.float64)
    run_and_compare(q, k, v, d_out, lmcore.MaskMod.sliding_window(12), lambda qq, kv: (kv <= qq) & (qq - kv <= 12),
                    lmcore.ScoreMod.relative_position_bias(bias, R),
                    lambda s, b, h, qq, kv: s + tb[(qq - kv).clamp(-R, R) + R], name="relative bias")
    # A Python score function with its derivative, and one without (forward only).
    user = lmcore.ScoreMod.from_function(lambda s, b, h, qq, kv: 2.0 * s + 0.01 * (qq - kv),
                                         lambda s, b, h, qq, kv: 2.0)
    run_and_compare(q[:, :, :20], k[:, :, :20], v[:, :, :20], d_out[:, :, :20], lmcore.MaskMod.causal(), causal, user,
                    lambda s, b, h, qq, kv: 2.0 * s + 0.01 * (qq - kv), name="user")
    run_and_compare(q[:, :, :20], k[:, :, :20], v[:, :, :20], d_out[:, :, :20], lmcore.MaskMod.causal(), causal,
                    lambda s, b, h, qq, kv: s * 0.5, lambda s, b, h, qq, kv: s * 0.5, backward=False,
                    name="user, forward only")


def test_flex_score_mod_parameter_grads_match_torch_autograd():
    """Gradients of the ALiBi slopes and the relative-position bias table (also chained through a
    softcap) against torch autograd through the same score function."""
    q, k, v, d_out = random_inputs(1, 4, 2, 37, 45, 16, 16, seed=31)
    B, Hq, L, _ = q.shape
    S = k.shape[2]
    qi, ki = grid(L, S)
    R = 6
    slopes = lmcore.ScoreMod.alibi_slopes(4)
    bias = np.linspace(-0.8, 0.6, 4 * (2 * R + 1), dtype=np.float32)
    cases = [
        ("alibi, window", lmcore.MaskMod.sliding_window(20), lambda qq, kv: (kv <= qq) & (qq - kv <= 20),
         [np.array(slopes, dtype=np.float32)], lambda ts: lmcore.ScoreMod.alibi(ts[0]),
         lambda p, s, h, qq, kv: s + p[0].view(1, 4, 1, 1) * (kv - qq)),
        ("per-head bias then softcap, causal", lmcore.MaskMod.causal(), lambda qq, kv: kv <= qq,
         [bias.reshape(4, 2 * R + 1)],
         lambda ts: lmcore.ScoreMod.relative_position_bias(ts[0], R).then(lmcore.ScoreMod.softcap(2.0)),
         lambda p, s, h, qq, kv: 2.0 * torch.tanh((s + p[0][h, (qq - kv).clamp(-R, R) + R]) / 2.0)),
        ("shared bias then alibi, all", lmcore.MaskMod.all(), lambda qq, kv: torch.ones_like(qq + kv, dtype=torch.bool),
         [bias[: 2 * R + 1].reshape(1, 2 * R + 1), np.array(slopes, dtype=np.float32)],
         lambda ts: lmcore.ScoreMod.relative_position_bias(ts[0], R).then(lmcore.ScoreMod.alibi(ts[1])),
         lambda p, s, h, qq, kv: s + p[0][0, (qq - kv).clamp(-R, R) + R] + p[1].view(1, 4, 1, 1) * (kv - qq)),
    ]
    for name, mask_mod, torch_mask, tables, make_mod, torch_fn in cases:
        mod = make_mod([t.reshape(-1).tolist() for t in tables])
        bm = lmcore.create_block_mask(mask_mod, 1, 1, L, S, 16, 16)
        out, lse = lmcore.flex_attention(q, k, v, block_mask=bm, score_mod=mod, return_lse=True)
        dq, dk, dv, grads = lmcore.flex_attention_backward(q, k, v, out, lse, d_out, block_mask=bm, score_mod=mod,
                                                           return_score_mod_grads=True)
        params = [torch.tensor(t, dtype=torch.float64, requires_grad=True) for t in tables]
        tq, tk, tv = (x.double().requires_grad_() for x in (q, k, v))
        ref_out, _ = torch_attention(tq, tk, tv, torch_mask(qi, ki),
                                     lambda s, b, h, qq, kv: torch_fn(params, s, h, qq, kv))
        ref_out.backward(d_out.double())
        assert len(grads) == len(params), name
        for i, (got, p) in enumerate(zip(grads, params)):
            got = to_torch(got)
            assert got.dtype == torch.float32 and got.shape == p.shape and not torch.isnan(got).any(), name
            close_within(f"{name}, table {i}", got, p.grad, torch.float32, *BOUNDS[torch.float32]["param"])
        close_within(f"{name}, dq", to_torch(dq), tq.grad, torch.float32, *BOUNDS[torch.float32]["grad"])
        # Without the flag the result stays (dq, dk, dv).
        assert len(lmcore.flex_attention_backward(q, k, v, out, lse, d_out, block_mask=bm, score_mod=mod)) == 3


def attention_backward_given_out(q, k, v, d_out, out, mask, scale=None):
    """The attention backward written out in float64, with the softmax's delta_i = d_out_i . out_i taken
    from the given output (as lmcore's kernels and FlashAttention do with the output they are passed; in
    bf16/f16 that is the rounded one). q, k, v, d_out, out float64; mask [L, S] bool."""
    Hq, D = q.shape[1], q.shape[3]
    group = Hq // k.shape[1]
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = ((q @ kk.transpose(-1, -2)) * scale).masked_fill(~mask, float("-inf"))
    has = mask.any(-1, keepdim=True)
    p = torch.softmax(torch.where(has, s, torch.zeros_like(s)), -1) * has
    dp = d_out @ vv.transpose(-1, -2)
    delta = (d_out * out).sum(-1, keepdim=True)
    ds = p * (dp - delta) * scale
    fold = lambda x: x.unflatten(1, (k.shape[1], group)).sum(2)
    return ds @ kk, fold(ds.transpose(-1, -2) @ q), fold(p.transpose(-1, -2) @ d_out)


BF16_MATRIX_UNITS = dict(out=(5 / 8, 0), lse=(4, 0), grad=(5 / 8, 0), param=(64, 0))


@pytest.fixture(params=["auto", "widened"])
def lowp_path(request):
    """Runs a test with bf16 on the matrix units where this CPU has them, and again widened to f32."""
    lmcore.set_lowp_gemm_onednn(request.param == "auto")
    yield lmcore.lowp_gemm_path("bf16")
    lmcore.set_lowp_gemm_onednn(True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_flex_low_precision(dtype, lowp_path):
    bounds = BF16_MATRIX_UNITS if dtype == torch.bfloat16 and lowp_path == "onednn" else BOUNDS[dtype]
    q, k, v, d_out = random_inputs(1, 2, 2, 50, 50, 16, 16, seed=21, dtype=dtype)
    window = lambda qq, kv: (kv <= qq) & (qq - kv <= 7)
    bm = lmcore.create_block_mask(lmcore.MaskMod.sliding_window(7), 1, 1, 50, 50, 16, 16)
    out, lse = (to_torch(x) for x in lmcore.flex_attention(q, k, v, block_mask=bm, return_lse=True))
    assert out.dtype == dtype
    tq, tk, tv = (x.double().requires_grad_() for x in (q, k, v))
    mask = window(*grid(50, 50))
    ref_out, ref_lse = torch_attention(tq, tk, tv, mask)
    close_within(f"{dtype} out", out, ref_out, dtype, *bounds["out"])
    close_within(f"{dtype} lse", lse, ref_lse, torch.float32, *bounds["lse"])
    # The written-out backward is autograd's when given the exact output.
    ref_out.backward(d_out.double())
    exact = attention_backward_given_out(*(x.detach() for x in (tq, tk, tv)), d_out.double(), ref_out.detach(), mask)
    for name, got, want in zip(("dq", "dk", "dv"), exact, (tq.grad, tk.grad, tv.grad)):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12, msg=lambda m: f"written-out {name}: {m}")
    # The kernel, given its rounded output, against the same definition on the same values.
    grads = lmcore.flex_attention_backward(q, k, v, out, lse, d_out, block_mask=bm)
    want = attention_backward_given_out(tq.detach(), tk.detach(), tv.detach(), d_out.double(), out.double(), mask)
    for name, got, w in zip(("dq", "dk", "dv"), grads, want):
        got = to_torch(got)
        assert got.dtype == dtype and not torch.isnan(got.float()).any(), name
        close_within(f"{dtype} {name}", got, w, dtype, *bounds["grad"])


def test_empty_rows_are_zero_and_never_nan():
    q, k, v, d_out = random_inputs(1, 2, 2, 30, 30, 8, 8, seed=5)
    run_and_compare(q, k, v, d_out, lambda b, h, qq, kv: qq >= 10 and kv <= qq, lambda qq, kv: (qq >= 10) & (kv <= qq),
                    name="empty rows")
    bm = lmcore.create_block_mask(lmcore.MaskMod.causal() & ~lmcore.MaskMod.all(), 1, 1, 30, 30)
    out, lse = lmcore.flex_attention(q, k, v, block_mask=bm, return_lse=True)
    assert torch.all(to_torch(out) == 0) and torch.all(torch.isneginf(to_torch(lse)))


def test_sdpa_matches_torch():
    q, k, v, d_out = random_inputs(2, 4, 2, 70, 45, 16, 8, seed=31)
    qi, ki = grid(70, 45)
    for causal, mask in ((False, None), (True, None), (False, ((qi * ki) % 5 != 1) & (qi != 3))):
        torch_mask = (ki <= qi) if causal else (mask if mask is not None else torch.ones(70, 45, dtype=torch.bool))
        out, lse = lmcore.sdpa(q, k, v, attn_mask=mask, causal=causal)
        tq, tk, tv = (x.double().requires_grad_() for x in (q, k, v))
        ref_out, ref_lse = torch_attention(tq, tk, tv, torch_mask)
        name = f"sdpa causal={causal} mask={mask is not None}"
        close_within(f"{name} out", to_torch(out), ref_out, torch.float32, *BOUNDS[torch.float32]["out"])
        close_within(f"{name} lse", to_torch(lse), ref_lse, torch.float32, *BOUNDS[torch.float32]["lse"])
        ref_out.backward(d_out.double())
        dq, dk, dv = (to_torch(x) for x in lmcore.sdpa_backward(q, k, v, to_torch(out), to_torch(lse), d_out,
                                                               attn_mask=mask, causal=causal))
        for gname, got, want in (("dq", dq, tq.grad), ("dk", dk, tk.grad), ("dv", dv, tv.grad)):
            close_within(f"{name} {gname}", got, want, torch.float32, *BOUNDS[torch.float32]["grad"])


def test_block_mask_properties_and_errors():
    bm = lmcore.create_block_mask(lmcore.MaskMod.sliding_window(256), 1, 1, 4096, 4096)
    assert bm.num_q_blocks == 32 and bm.nonempty_blocks() == 32 + 31 + 30
    assert bm.block_density() == pytest.approx(93 / 1024)
    assert 0 < bm.element_density() < bm.block_density()
    with pytest.raises(lmcore.Error, match="block mask was built for"):
        q = torch.zeros(1, 1, 100, 8)
        lmcore.flex_attention(q, q, q, block_mask=bm)
    with pytest.raises(lmcore.Error, match="derivative"):
        q = torch.zeros(1, 1, 8, 8)
        out, lse = lmcore.flex_attention(q, q, q, score_mod=lambda s, b, h, i, j: s, return_lse=True)
        lmcore.flex_attention_backward(q, q, q, out, lse, q, score_mod=lambda s, b, h, i, j: s)
