# lmcore.torch.flex_attention with PyTorch 2.13's signature and autograd, against masked softmax
# attention written out in torch 1.13 (float64 autograd: the gradient oracle of the f32/bf16/f16
# paths; torch.autograd.gradcheck of the f64 path is in test_torch_flex64.py), the BlockMask surface,
# callables with PyTorch's signatures, and the argument errors and defects of issue 17.
import math
import os

import pytest
import torch

import lmcore
import lmcore.torch as lt
from bounds import close_within
from test_attention import BF16_MATRIX_UNITS, BOUNDS, attention_backward_given_out, torch_attention


# A trainable cap's gradient sums d loss / d score x d score / d cap over every score, with cancellation
# (a softmax's score gradients sum to 0 per row): its error follows the sum of the terms' magnitudes, not
# the result's. Measured <= 0.21 eps sum|terms| (LMCORE_TEST_REPORT_ERRORS=1); bound 2; each case also
# checks that a 1% error of the result exceeds the bound (the closest case: 1% = 6.0 eps sum|terms|).
CAP, BOUNDS_EPS = 2, 2.0 ** -23


def inputs(B, Hq, Hkv, L, S, D, Dv, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, L, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, Dv, generator=g).to(dtype)
    d_out = torch.randn(B, Hq, L, Dv, generator=g).to(dtype)
    return q, k, v, d_out


def dense_mask(mask_fn, B, H, L, S):
    if mask_fn is None:
        return torch.ones(1, 1, L, S, dtype=torch.bool)
    return lt.create_mask(mask_fn, B, H, L, S)


def window(b, h, q, kv):
    return (kv <= q) & (q - kv <= 9)


def per_batch(b, h, q, kv):
    return (kv <= q) & ((q + kv + b + h) % 3 != 0)


MASKS = {
    "none": None,
    "causal-callable": lambda b, h, q, kv: q >= kv,
    "sliding-builtin": lmcore.MaskMod.sliding_window(9),
    "per-batch-head-callable": per_batch,
    "and(callable, builtin)": lt.and_masks(lambda b, h, q, kv: (q - kv) % 4 != 1, lmcore.MaskMod.causal()),
    "or(window, prefix)": lt.or_masks(window, lambda b, h, q, kv: kv < 5),
}


def score_mods(H):
    slopes = torch.tensor([2.0 ** (-(i + 1)) for i in range(H)], requires_grad=True)
    table = (0.4 * torch.randn(H, 7, generator=torch.Generator().manual_seed(3))).requires_grad_()
    shared = (0.4 * torch.randn(1, 11, generator=torch.Generator().manual_seed(4))).requires_grad_()
    cap = torch.tensor(1.75, requires_grad=True)
    return {
        "none": (None, []),
        "alibi": (lt.alibi(slopes), [slopes]),
        "relative-per-head": (lt.relative_position_bias(table), [table]),
        "relative-shared then alibi": (lt.relative_position_bias(shared).then(lt.alibi(slopes)), [shared, slopes]),
        "alibi then softcap": (lt.alibi(slopes).then(lt.softcap(2.5)), [slopes]),
        "softcap": (lt.softcap(1.5), []),
        "trainable softcap": (lt.softcap(cap), [cap]),
        "alibi, trainable softcap, relative": (lt.alibi(slopes).then(lt.softcap(cap)).then(
            lt.relative_position_bias(table)), [slopes, cap, table]),
    }


def check_against_torch(q, k, v, d_out, mask_fn, score, params, scale=None, enable_gqa=False, name=""):
    B, Hq, L, _ = q.shape
    S = k.shape[2]
    bm = None if mask_fn is None else lt.create_block_mask(mask_fn, B, Hq, L, S, BLOCK_SIZE=(16, 8))
    tq, tk, tv = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = lt.flex_attention(tq, tk, tv, score_mod=score, block_mask=bm, scale=scale, enable_gqa=enable_gqa,
                                 return_lse=True)
    assert out.dtype == q.dtype and lse.dtype == torch.float32 and out.shape == (B, Hq, L, v.shape[-1])
    out.backward(d_out)
    got_params = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    rq, rk, rv = (x.double().requires_grad_() for x in (q, k, v))
    # A tensor cap enters the reference once per score ([B, Hq, L, S], all equal): its gradient is the sum
    # of those elements' gradients, and the sum of their magnitudes is the scale its rounding follows.
    ref_params = [p.detach().double().expand(B, Hq, L, S).clone().requires_grad_() if p.dim() == 0
                  else p.detach().double().requires_grad_() for p in params]
    ref_score = None
    if score is not None:
        ref_score = lt.ScoreMod([(kind, ref_params[[id(p) for p in params].index(id(val))] if isinstance(val, torch.Tensor)
                                 else val)
                                 for kind, val in score._steps])
    ref_out, ref_lse = torch_attention(rq, rk, rv, dense_mask(mask_fn, B, Hq, L, S), ref_score, scale)
    ref_out.backward(d_out.double())
    b = BOUNDS[torch.float32]
    close_within(f"{name} out", out, ref_out, torch.float32, *b["out"])
    close_within(f"{name} lse", lse, ref_lse, torch.float32, *b["lse"])
    for gname, got, want in (("dq", tq.grad, rq.grad), ("dk", tk.grad, rk.grad), ("dv", tv.grad, rv.grad)):
        close_within(f"{name} {gname}", got, want, torch.float32, *b["grad"])
    for i, (got, want) in enumerate(zip(got_params, ref_params)):
        if got.dim() == 0:  # a cap: |got - want| <= CAP eps sum of the per-score terms' magnitudes
            terms, want = want.grad, want.grad.sum()
            bound = CAP * BOUNDS_EPS * terms.abs().sum().item()
            if os.environ.get("LMCORE_TEST_REPORT_ERRORS"):
                print(f"[error] {name} cap gradient: {abs(got.item() - want.item()) / bound * CAP:.3f} eps sum|terms|, "
                      f"1% of it is {0.01 * abs(want.item()) / bound * CAP:.3f} eps sum|terms|")
            assert abs(got.item() - want.item()) <= bound, f"{name} cap gradient: got {got.item()}, want {want.item()}"
            assert 0.01 * abs(want.item()) > bound, f"{name} cap gradient: the bound {bound} passes a 1% error"
            continue
        close_within(f"{name} score-mod parameter {i}", got, want.grad, torch.float32, *b["param"])


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("score", list(score_mods(4)))
def test_forward_and_gradients_match_torch(mask, score):
    q, k, v, d_out = inputs(2, 4, 4, 37, 29, 8, 6, seed=len(mask) + 7 * len(score))
    sm, params = score_mods(4)[score]
    check_against_torch(q, k, v, d_out, MASKS[mask], sm, params, name=f"{mask}/{score}")


def test_gqa_strides_and_scale():
    q, k, v, d_out = inputs(2, 6, 2, 33, 33, 16, 8, seed=5)
    q = q.transpose(2, 3).contiguous().transpose(2, 3)  # strided: L is not the innermost stride's neighbour
    k = k[:, :, :, :]
    sm, params = score_mods(6)["alibi then softcap"]
    check_against_torch(q, k, v, d_out, window, sm, params, scale=0.3, enable_gqa=True, name="gqa")
    with pytest.raises(ValueError, match="query has 6 heads and key/value 2: pass enable_gqa=True"):
        lt.flex_attention(q, k, v)


def test_scale_zero_is_uniform_attention():
    q, k, v, d_out = inputs(1, 2, 2, 10, 10, 4, 4, seed=6)
    check_against_torch(q, k, v, d_out, None, None, [], scale=0.0, name="scale 0")


def test_pytorch_style_keyword_code_runs_unchanged():
    # As written for torch.nn.attention.flex_attention in PyTorch 2.13, with only the import changed.
    from lmcore.torch import create_block_mask, flex_attention

    def sliding_window_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= 16)

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx) * 0.01

    q, k, v, _ = inputs(2, 4, 4, 64, 64, 16, 16, seed=8)
    block_mask = create_block_mask(mask_mod=sliding_window_causal, B=None, H=None, Q_LEN=64, KV_LEN=64, device="cpu",
                                   BLOCK_SIZE=32)
    out, lse = flex_attention(query=q, key=k, value=v, score_mod=None, block_mask=block_mask, scale=None,
                              enable_gqa=False, return_lse=True, kernel_options={"BLOCK_M": 64})
    ref_out, ref_lse = torch_attention(q.double(), k.double(), v.double(),
                                       lt.create_mask(sliding_window_causal, 1, 1, 64, 64))
    close_within("keyword out", out, ref_out, torch.float32, *BOUNDS[torch.float32]["out"])
    close_within("keyword lse", lse, ref_lse, torch.float32, *BOUNDS[torch.float32]["lse"])
    # A Python score_mod with PyTorch's signature, on a small problem (it is called per element).
    q, k, v, d_out = inputs(1, 2, 2, 12, 12, 4, 4, seed=9)
    tq, tk = q.clone().requires_grad_(), k.clone().requires_grad_()
    out = flex_attention(tq, tk, v, score_mod=rel_bias, block_mask=create_block_mask(sliding_window_causal, 1, 1, 12,
                                                                                      12, BLOCK_SIZE=4))
    out.backward(d_out)
    rq, rk = q.double().requires_grad_(), k.double().requires_grad_()
    ref, _ = torch_attention(rq, rk, v.double(), lt.create_mask(sliding_window_causal, 1, 1, 12, 12), rel_bias)
    ref.backward(d_out.double())
    close_within("callable score_mod out", out, ref, torch.float32, *BOUNDS[torch.float32]["out"])
    close_within("callable score_mod dq", tq.grad, rq.grad, torch.float32, *BOUNDS[torch.float32]["grad"])
    close_within("callable score_mod dk", tk.grad, rk.grad, torch.float32, *BOUNDS[torch.float32]["grad"])


def test_callable_score_mod_on_a_trainable_tensor_is_refused():
    slopes = torch.ones(2, requires_grad=True)
    q, k, v, _ = inputs(1, 2, 2, 8, 8, 4, 4, seed=10)
    with pytest.raises(ValueError, match="depends on a tensor that requires grad.*lmcore.torch.alibi"):
        lt.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + slopes[h] * (kv - qi))
    with pytest.raises(ValueError, match=r"softcap: expected one number, found a tensor of shape \[2\]"):
        lt.softcap(torch.ones(2, requires_grad=True))
    with pytest.raises(ValueError, match="softcap: expected a finite number > 0, found -1.0"):
        lt.softcap(torch.tensor(-1.0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision(dtype):
    on_units = dtype == torch.bfloat16 and lmcore.lowp_gemm_path("bf16") == "onednn"
    bounds = BF16_MATRIX_UNITS if on_units else BOUNDS[dtype]
    q, k, v, d_out = inputs(1, 2, 2, 50, 50, 16, 16, seed=21, dtype=dtype)
    bm = lt.create_block_mask(window, None, None, 50, 50, BLOCK_SIZE=16)
    tq, tk, tv = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = lt.flex_attention(tq, tk, tv, block_mask=bm, return_lse=True)
    assert out.dtype == dtype
    out.backward(d_out)
    mask = lt.create_mask(window, 1, 1, 50, 50)
    ref_out, ref_lse = torch_attention(q.double(), k.double(), v.double(), mask)
    close_within(f"{dtype} out", out, ref_out, dtype, *bounds["out"])
    close_within(f"{dtype} lse", lse, ref_lse, torch.float32, *bounds["lse"])
    # The kernel's backward uses its rounded output (as FlashAttention does): the oracle does too.
    want = attention_backward_given_out(q.double(), k.double(), v.double(), d_out.double(), out.detach().double(),
                                        mask[0, 0])
    for name, got, w in zip(("dq", "dk", "dv"), (tq.grad, tk.grad, tv.grad), want):
        assert got.dtype == dtype
        close_within(f"{dtype} {name}", got, w, dtype, *bounds["grad"])


def test_block_mask_surface():
    L, S = 70, 50
    bm = lt.create_block_mask(per_batch, 2, 3, L, S, BLOCK_SIZE=(16, 8))
    assert bm.shape == (2, 3, L, S) and bm.BLOCK_SIZE == (16, 8) and bm.seq_lengths == (L, S)
    dense = lt.create_mask(per_batch, 2, 3, L, S)
    assert dense.shape == (2, 3, L, S) and dense.dtype == torch.bool
    assert torch.equal(dense, torch.from_numpy(lmcore.MaskMod.from_function(
        lambda b, h, q, kv: bool(per_batch(b, h, q, kv))).dense(2, 3, L, S)))
    # Block table from the dense mask: a block is listed when any element is allowed, full when all are.
    pad = torch.zeros(2, 3, 80, 56, dtype=torch.bool)
    pad[:, :, :L, :S] = dense
    blocks = pad.view(2, 3, 5, 16, 7, 8)
    valid = torch.zeros(80, 56, dtype=torch.bool)
    valid[:L, :S] = True
    vblocks = valid.view(5, 16, 7, 8)
    any_ = blocks.any(5).any(3)
    full = ((blocks | ~vblocks).all(5).all(3))
    assert torch.equal(bm.to_dense(), any_.to(torch.int32))
    assert torch.equal(bm.kinds(), torch.where(full, 2, torch.where(any_, 1, 0)).to(torch.uint8))
    assert bm.sparsity() == pytest.approx(100 * (1 - any_.float().mean().item()))
    # as_tuple / from_kv_blocks round trip, PyTorch's order: listed blocks first, increasing.
    t = bm.as_tuple()
    assert t[0:2] == (L, S) and t[10:12] == (16, 8) and t[12] is per_batch
    kv_n, kv_i, f_n, f_i = t[2:6]
    assert kv_n.dtype == torch.int32 and kv_i.shape == (2, 3, 5, 7)
    assert torch.equal(kv_n + f_n, any_.sum(-1).to(torch.int32))
    for row in range(5):
        n = kv_n[1, 2, row].item()
        assert kv_i[1, 2, row, :n].tolist() == sorted(kv_i[1, 2, row, :n].tolist())
    assert torch.equal(t[6] + t[8], any_.sum(-2).to(torch.int32))
    names = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks", "q_indices",
             "full_q_num_blocks", "full_q_indices")
    for i, n in enumerate(names):
        assert torch.equal(getattr(bm, n), t[2 + i]), n
    assert bm.to("cpu") is bm
    with pytest.raises(ValueError, match="device: lmcore runs on the CPU"):
        bm.to("cuda")
    back = lt.BlockMask.from_kv_blocks(kv_n, kv_i, f_n, f_i, BLOCK_SIZE=(16, 8), mask_mod=per_batch,
                                       seq_lengths=(L, S))
    assert torch.equal(back.kinds(), bm.kinds()) and back.shape == bm.shape
    # Slicing: batch 1, heads 1..2 of the mask is the mask of those batches and heads.
    sub = bm[1, 1:3]
    assert sub.shape == (1, 2, L, S)
    assert torch.equal(sub.kinds(), bm.kinds()[1:2, 1:3])
    q, k, v, _ = inputs(1, 2, 2, L, S, 8, 8, seed=12)
    out = lt.flex_attention(q, k, v, block_mask=sub)
    ref, _ = torch_attention(q.double(), k.double(), v.double(), dense[1:2, 1:3])
    close_within("sliced mask out", out, ref, torch.float32, *BOUNDS[torch.float32]["out"])
    assert bm[0].shape == (1, 3, L, S)
    s = bm.to_string()
    assert s.startswith("BlockMask(shape=(2, 3, 70, 50)") and "░" in s and "(1, 2)" not in s
    assert "(1, 2)" in bm.to_string(limit=6)
    causal = lt.create_block_mask(lambda b, h, qi, kv: qi >= kv, None, None, 48, 48, BLOCK_SIZE=16).to_string()
    assert causal.split("\n")[2:] == ["░  ", "█░ ", "██░"]


def test_from_kv_blocks_validation_and_noop():
    n = torch.tensor([[[1, 1]]], dtype=torch.int32)
    idx = torch.tensor([[[[0, 1], [1, 0]]]], dtype=torch.int32)
    bm = lt.BlockMask.from_kv_blocks(n, idx, BLOCK_SIZE=4)
    assert bm.shape == (1, 1, 8, 8) and bm.kinds()[0, 0].tolist() == [[1, 0], [0, 1]]
    with pytest.raises(ValueError, match=r"listed block indices must be in \[0, 2\), found 0..5"):
        lt.BlockMask.from_kv_blocks(n, torch.tensor([[[[5, 0], [0, 1]]]]), BLOCK_SIZE=4)
    with pytest.raises(ValueError, match=r"block counts must be in \[0, 2\]"):
        lt.BlockMask.from_kv_blocks(torch.tensor([[[3, 1]]]), idx, BLOCK_SIZE=4)
    q, k, v, _ = inputs(1, 1, 1, 8, 8, 4, 4, seed=13)
    out = lt.flex_attention(q, k, v, block_mask=bm)  # noop mask inside the listed blocks: block diagonal
    mask = torch.zeros(8, 8, dtype=torch.bool)
    mask[:4, :4] = mask[4:, 4:] = True
    ref, _ = torch_attention(q.double(), k.double(), v.double(), mask)
    close_within("from_kv_blocks out", out, ref, torch.float32, *BOUNDS[torch.float32]["out"])
    assert lt.noop_mask(0, 0, 0, 0).item() is True
    assert bool(lt.and_masks(window, lmcore.MaskMod.causal())(torch.tensor(0), 0, torch.tensor(5),
                                                              torch.tensor(3))) is True


def test_argument_errors():
    q, k, v, _ = inputs(2, 2, 2, 16, 16, 8, 8, seed=14)
    with pytest.raises(TypeError, match=r"query: expected dtype float32, bfloat16, float16, float64, found int64"):
        lt.flex_attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="query, key, value: expected one dtype"):
        lt.flex_attention(q.double(), k, v)
    with pytest.raises(TypeError, match="query, key, value: expected one dtype"):
        lt.flex_attention(q, k.half(), v)
    with pytest.raises(ValueError, match=r"key: expected 4 dimensions \[B, H, L, D\], found shape \[2, 16, 8\]"):
        lt.flex_attention(q, k[0], v)
    with pytest.raises(ValueError, match="block_mask: built for Q_LEN=8, KV_LEN=16"):
        lt.flex_attention(q, k, v, block_mask=lt.create_block_mask(window, None, None, 8, 16))
    for mm in (window, lmcore.MaskMod.causal()):  # built for B = 3, run on a batch of 2
        with pytest.raises(lmcore.Error, match="block mask was built for"):
            lt.flex_attention(q, k, v, block_mask=lt.create_block_mask(mm, 3, None, 16, 16))
    with pytest.raises(ValueError, match=r"alibi has 1 slopes, expected one per query head \(2\)"):
        lt.flex_attention(q, k, v, score_mod=lt.alibi(torch.ones(1)))
    with pytest.raises(ValueError, match=r"table: expected shape \[H or 1, 2R \+ 1\]"):
        lt.relative_position_bias(torch.ones(2, 4))
    with pytest.raises(ValueError, match="device: lmcore runs on the CPU"):
        lt.create_block_mask(window, 1, 1, 16, 16, device="cuda")
    with pytest.raises(TypeError, match="mask_mod: expected it to return bool, found torch.int64"):
        lt.create_block_mask(lambda b, h, qi, kv: qi - kv, 1, 1, 16, 16)
    with pytest.raises(KeyError, match="mask boom"):
        def bad(b, h, qi, kv):
            raise KeyError("mask boom")
        lt.create_block_mask(bad, 1, 1, 16, 16)


def test_nan_propagates_and_only_emptied_rows_are_zero():
    # Issue 17's reproducer: a NaN in q row 3 gave out 0 and lse -inf there (a "masked" row) while the
    # backward gave NaN. Now row 3 is NaN in the forward as in torch, the other rows are unchanged, and a
    # row the mask empties (row 0 here) is 0 with lse -inf and zero gradients.
    q, k, v, d_out = inputs(1, 1, 1, 12, 12, 4, 4, seed=15)
    bm = lt.create_block_mask(lambda b, h, qi, kv: (kv <= qi) & (qi > 0), None, None, 12, 12, BLOCK_SIZE=4)
    clean_out, clean_lse = lt.flex_attention(q, k, v, block_mask=bm, return_lse=True)
    q2 = q.clone()
    q2[0, 0, 3, 1] = float("nan")
    tq = q2.clone().requires_grad_()
    out, lse = lt.flex_attention(tq, k, v, block_mask=bm, return_lse=True)
    assert torch.isnan(out[0, 0, 3]).all() and torch.isnan(lse[0, 0, 3])
    rows = [i for i in range(12) if i != 3]
    assert torch.equal(out[0, 0, rows], clean_out[0, 0, rows]) and torch.equal(lse[0, 0, rows], clean_lse[0, 0, rows])
    assert torch.equal(out[0, 0, 0], torch.zeros(4)) and lse[0, 0, 0] == -math.inf
    out.backward(d_out)
    assert torch.equal(tq.grad[0, 0, 0], torch.zeros(4))
    assert torch.isnan(tq.grad[0, 0, 3]).all()


def test_gradient_through_lse():
    # d lse_i / d s_ij = P_ij: a loss on the returned lse (as well as on out) reaches q, k and the slopes.
    q, k, v, d_out = inputs(1, 2, 2, 24, 20, 8, 4, seed=16)
    g = torch.randn(1, 2, 24, generator=torch.Generator().manual_seed(17))
    slopes = torch.tensor([0.5, 0.25], requires_grad=True)
    bm = lt.create_block_mask(window, None, None, 24, 20, BLOCK_SIZE=8)
    tq, tk, tv = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = lt.flex_attention(tq, tk, tv, score_mod=lt.alibi(slopes), block_mask=bm, return_lse=True)
    assert lse.requires_grad
    ((out * d_out).sum() + (lse * g).sum()).backward()
    rq, rk, rv = (x.double().requires_grad_() for x in (q, k, v))
    rs = slopes.detach().double().requires_grad_()
    ref_out, ref_lse = torch_attention(rq, rk, rv, lt.create_mask(window, 1, 1, 24, 20), lt.alibi(rs))
    ((ref_out * d_out.double()).sum() + (ref_lse * g.double()).sum()).backward()
    b = BOUNDS[torch.float32]
    for name, got, want in (("dq", tq.grad, rq.grad), ("dk", tk.grad, rk.grad), ("dv", tv.grad, rv.grad)):
        close_within(f"with lse: {name}", got, want, torch.float32, *b["grad"])
    close_within("with lse: d slopes", slopes.grad, rs.grad, torch.float32, *b["param"])
    # lse alone: out unused (its gradient is zeros), v gets none.
    tq.grad = None
    tv.grad = None
    _, lse = lt.flex_attention(tq, tk, tv, block_mask=bm, return_lse=True)
    (lse * g).sum().backward()
    rq.grad = None
    _, ref_lse = torch_attention(rq, rk, rv, lt.create_mask(window, 1, 1, 24, 20))
    (ref_lse * g.double()).sum().backward()
    close_within("lse only: dq", tq.grad, rq.grad, torch.float32, *b["grad"])
    assert tv.grad is None or torch.equal(tv.grad, torch.zeros_like(tv))


def test_empty_sizes():
    for (B, L, S) in ((1, 0, 5), (1, 4, 0), (0, 4, 4)):
        q = torch.randn(B, 2, L, 8, requires_grad=True)
        k, v = torch.randn(B, 2, S, 8, requires_grad=True), torch.randn(B, 2, S, 8, requires_grad=True)
        out = lt.flex_attention(q, k, v)
        assert out.shape == (B, 2, L, 8) and not torch.isnan(out).any()
        out.sum().backward()
        assert torch.equal(q.grad, torch.zeros_like(q))  # no keys (S = 0): rows are empty, out 0
    with pytest.raises(TypeError, match="kv_num_blocks: expected an integer torch.Tensor, found a torch.float32 tensor"):
        lt.BlockMask.from_kv_blocks(torch.ones(1, 1, 1), torch.zeros(1, 1, 1, 1))
