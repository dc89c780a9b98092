"""lmcore.torch.flex_attention: PyTorch 2.13's flex_attention on lmcore's kernels, with autograd.

    bm = lmcore.torch.create_block_mask(lmcore.MaskMod.sliding_window(256), None, None, L, L)
    slopes = torch.nn.Parameter(torch.tensor(lmcore.ScoreMod.alibi_slopes(H)))
    out = lmcore.torch.flex_attention(q, k, v, score_mod=lmcore.torch.alibi(slopes), block_mask=bm)
    out.sum().backward()      # q.grad, k.grad, v.grad and slopes.grad

q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], f32/bf16/f16/f64 (one dtype), any strides; out
[B, Hq, L, Dv] in q's dtype, lse [B, Hq, L] f32 (f64 for f64 inputs; natural log); both carry gradients. scale None is 1/sqrt(D). Hq != Hkv needs
enable_gqa=True, as in PyTorch. kernel_options (PyTorch's Triton tuning knobs) are accepted and
have no effect here.

Score modifiers: lmcore.torch.alibi(slopes), relative_position_bias(table), softcap(c) and their
chains (a.then(b)) take torch tensors; slopes, tables and a tensor cap that require grad receive
their gradient (the kernel computes it, in f32, or f64 for f64 inputs). Each is also callable with PyTorch's signature
(score, b, h, q_idx, kv_idx) on tensors, so the same object drives a plain-torch reference. A
Python callable score_mod keeps working: it is called per element with 0-d tensors (slow), and its
derivative with respect to the score comes from torch.autograd per element; a callable whose result
depends on a tensor that requires grad is refused (its gradient would be lost), use the built-ins.

float64 inputs run lmcore's f64 kernels end to end (f64 tiles, score-modifier tables and caps passed
in f64, f64 out, lse and gradients), so torch.autograd.gradcheck runs on this function itself
(tests/python/test_torch_flex64.py). Other dtypes compute in f32, with the tables rounded to f32.
"""
import math

import torch

from lmcore import _lmcore
from lmcore.torch._convert import check_tensor, from_lmcore, to_lmcore
from lmcore.torch._masks import BlockMask

_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


class ScoreMod:
    """A chain of score modifiers with torch parameters; build with alibi, relative_position_bias, softcap."""

    def __init__(self, steps):
        self._steps = list(steps)  # (kind, value): ("alibi", slopes), ("rel", table [rows, 2R+1]), ("softcap", c)

    def then(self, nxt):
        """This modifier, then nxt."""
        if not isinstance(nxt, ScoreMod):
            raise TypeError(f"then: expected an lmcore.torch score modifier, found {type(nxt).__name__}")
        return ScoreMod(self._steps + nxt._steps)

    def parameters(self):
        """The parameter tensors in chain order (slopes, tables, tensor caps), as the kernel returns their
        gradients."""
        return [v for kind, v in self._steps if kind in ("alibi", "rel") or isinstance(v, torch.Tensor)]

    def to_lmcore(self):
        # Tables go in f64 (exact for f32/bf16/f16 ones): the f64 kernels use them as they are, the f32
        # kernels round them to f32 once.
        m = _lmcore.ScoreMod()
        for kind, v in self._steps:
            if kind == "alibi":
                step = _lmcore.ScoreMod.alibi(to_lmcore(v.detach().double().contiguous(), "slopes"))
            elif kind == "rel":
                step = _lmcore.ScoreMod.relative_position_bias(to_lmcore(v.detach().double().contiguous().reshape(-1),
                                                                         "table"), (v.shape[-1] - 1) // 2)
            elif isinstance(v, torch.Tensor):  # a cap given as a tensor is a parameter
                step = _lmcore.ScoreMod.softcap(float(v), True)
            else:
                step = _lmcore.ScoreMod.softcap(v)
            m = m.then(step)
        return m

    def __call__(self, score, b, h, q_idx, kv_idx):
        """PyTorch's score_mod signature, on (broadcastable) tensors: the plain-torch definition."""
        for kind, v in self._steps:
            if kind == "alibi":
                score = score + v[h] * (kv_idx - q_idx)
            elif kind == "rel":
                R = (v.shape[-1] - 1) // 2
                row = h if v.shape[0] > 1 else torch.zeros_like(torch.as_tensor(h))
                score = score + v[row, torch.clamp(q_idx - kv_idx, -R, R) + R]
            else:
                score = v * torch.tanh(score / v)
        return score

    def __repr__(self):
        return " then ".join(f"{k}({'tensor ' + str(list(v.shape)) if isinstance(v, torch.Tensor) else v})"
                             for k, v in self._steps) or "identity"


def alibi(slopes):
    """score + slopes[h] * (kv_idx - q_idx); slopes [Hq] (trainable when it requires grad)."""
    check_tensor(slopes, "slopes", (torch.float32, torch.float64, torch.bfloat16, torch.float16))
    if slopes.dim() != 1:
        raise ValueError(f"slopes: expected shape [H] (one slope per query head), found {list(slopes.shape)}")
    return ScoreMod([("alibi", slopes)])


def relative_position_bias(table):
    """score + table[h, clamp(q_idx - kv_idx, -R, R) + R]; table [H or 1, 2R + 1] (or [2R + 1])."""
    check_tensor(table, "table", (torch.float32, torch.float64, torch.bfloat16, torch.float16))
    if table.dim() == 1:
        table = table.unsqueeze(0)
    if table.dim() != 2 or table.shape[-1] % 2 != 1:
        raise ValueError(f"table: expected shape [H or 1, 2R + 1] (an odd number of distances), found "
                         f"{list(table.shape)}")
    return ScoreMod([("rel", table)])


def softcap(c):
    """c * tanh(score / c), c > 0: a number, or a one-element tensor (trainable when it requires grad)."""
    if isinstance(c, torch.Tensor):
        check_tensor(c, "c", (torch.float32, torch.float64, torch.bfloat16, torch.float16))
        if c.numel() != 1:
            raise ValueError(f"softcap: expected one number, found a tensor of shape {list(c.shape)}")
        value = c.item()
    else:
        value = c
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"softcap: expected a finite number > 0, found {value!r}")
    return ScoreMod([("softcap", c if isinstance(c, torch.Tensor) else float(c))])


def _callable_score_mod(fn, dtype=torch.float32):
    """lmcore.ScoreMod of a Python callable with PyTorch's signature, and its derivative by autograd.
    The score reaches fn as a 0-d tensor of `dtype` (float64 for the f64 kernels, float32 otherwise)."""
    probe = fn(torch.tensor(0.5, requires_grad=False), *(torch.tensor(0) for _ in range(4)))
    if isinstance(probe, torch.Tensor) and probe.requires_grad:
        raise ValueError("score_mod: the callable's result depends on a tensor that requires grad, whose gradient "
                         "lmcore cannot compute through a Python callable; use lmcore.torch.alibi(slopes), "
                         "relative_position_bias(table) or softcap(c) (and .then chains) for trainable modifiers")

    def f(s, b, h, q, kv):
        return float(fn(torch.tensor(s, dtype=dtype), torch.tensor(b), torch.tensor(h), torch.tensor(q),
                        torch.tensor(kv)))

    def df(s, b, h, q, kv):
        with torch.enable_grad():
            x = torch.tensor(s, dtype=torch.float64, requires_grad=True)
            y = fn(x, torch.tensor(b), torch.tensor(h), torch.tensor(q), torch.tensor(kv))
            if not isinstance(y, torch.Tensor) or not y.requires_grad:
                return 0.0  # does not depend on the score
            (g,) = torch.autograd.grad(y, x)
        return float(g)

    return _lmcore.ScoreMod.from_function(f, df)


class _FlexAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, lm_mask, lm_score, scale, zero_q, *params):
        ctx.lm_mask, ctx.lm_score, ctx.scale, ctx.zero_q = lm_mask, lm_score, scale, zero_q
        # scale 0 (every score 0): lmcore reads scale 0 as "default", so scale 1 on a zero query instead
        qq = torch.zeros_like(q) if zero_q else q
        out, lse = _lmcore.flex_attention(to_lmcore(qq, "query"), to_lmcore(k, "key"), to_lmcore(v, "value"),
                                          block_mask=lm_mask, score_mod=lm_score, scale=scale, return_lse=True)
        out, lse = from_lmcore(out), from_lmcore(lse)
        ctx.save_for_backward(q, k, v, out, lse, *params)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, *params = ctx.saved_tensors
        if ctx.zero_q:
            q = torch.zeros_like(q)
        # d lse_i / d s_ij = P_ij: the kernel adds P_ij d_lse_i to each score's gradient.
        lm_d_lse = to_lmcore(d_lse.contiguous(), "grad of lse") if d_lse is not None and bool((d_lse != 0).any()) \
            else None
        want_params = any(ctx.needs_input_grad[7:])
        r = _lmcore.flex_attention_backward(
            to_lmcore(q, "query"), to_lmcore(k, "key"), to_lmcore(v, "value"), to_lmcore(out, "out"),
            to_lmcore(lse, "lse"), to_lmcore(d_out.contiguous(), "grad"), block_mask=ctx.lm_mask,
            score_mod=ctx.lm_score, scale=ctx.scale, return_score_mod_grads=want_params, d_lse=lm_d_lse)
        dq, dk, dv = (from_lmcore(t) for t in r[:3])
        if ctx.zero_q:
            dq = torch.zeros_like(q)
        grads = [None] * len(params)
        if want_params:
            for i, (p, g) in enumerate(zip(params, r[3])):
                grads[i] = from_lmcore(g).reshape(p.shape).to(p.dtype)
        return (dq, dk, dv, None, None, None, None, *grads)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None):
    """PyTorch's flex_attention on lmcore: out [B, Hq, L, Dv] (and lse [B, Hq, L] with return_lse)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(t, name, _DTYPES)
        if t.dim() != 4:
            raise ValueError(f"{name}: expected 4 dimensions [B, H, L, D], found shape {list(t.shape)}")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(f"query, key, value: expected one dtype, found {query.dtype}, {key.dtype}, {value.dtype}")
    B, Hq, L, D = query.shape
    if key.shape[0] != B or value.shape[0] != B:
        raise ValueError(f"key, value: expected batch {B} (query's), found {key.shape[0]} and {value.shape[0]}")
    if key.shape[-1] != D:
        raise ValueError(f"key: expected head dim {D} (query's), found {key.shape[-1]}")
    if tuple(value.shape[1:3]) != tuple(key.shape[1:3]):
        raise ValueError(f"value: expected [B, {key.shape[1]}, {key.shape[2]}, Dv] (key's heads and length), found "
                         f"{list(value.shape)}")
    Hkv = key.shape[1]
    if Hq != Hkv and not enable_gqa:
        raise ValueError(f"query has {Hq} heads and key/value {Hkv}: pass enable_gqa=True for grouped-query attention")
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv})")
    if kernel_options is not None and not isinstance(kernel_options, dict):
        raise TypeError(f"kernel_options: expected None or a dict, found {type(kernel_options).__name__}")
    lm_mask = None
    if block_mask is not None:
        if isinstance(block_mask, BlockMask):
            lm_mask = block_mask._lm
        elif isinstance(block_mask, _lmcore.BlockMask):
            lm_mask = block_mask
        else:
            raise TypeError(f"block_mask: expected an lmcore.torch BlockMask (create_block_mask), found "
                            f"{type(block_mask).__name__}")
        if (lm_mask.q_len, lm_mask.kv_len) != (L, key.shape[2]):
            raise ValueError(f"block_mask: built for Q_LEN={lm_mask.q_len}, KV_LEN={lm_mask.kv_len}, found query "
                             f"length {L} and key length {key.shape[2]}")
    params = []
    if score_mod is None:
        lm_score = None
    elif isinstance(score_mod, ScoreMod):
        lm_score, params = score_mod.to_lmcore(), score_mod.parameters()
    elif isinstance(score_mod, _lmcore.ScoreMod):
        lm_score = score_mod
    elif callable(score_mod):
        lm_score = _callable_score_mod(score_mod, torch.float64 if query.dtype == torch.float64 else torch.float32)
    else:
        raise TypeError(f"score_mod: expected a callable score_mod(score, b, h, q_idx, kv_idx) or an lmcore "
                        f"score modifier, found {type(score_mod).__name__}")
    if scale is not None and not math.isfinite(scale):
        raise ValueError(f"scale: expected a finite number or None, found {scale}")
    zero_q = scale is not None and scale == 0
    s = 1.0 if zero_q else 0.0 if scale is None else float(scale)
    out, lse = _FlexAttention.apply(query, key, value, lm_mask, lm_score, s, zero_q, *params)
    return (out, lse) if return_lse else out
