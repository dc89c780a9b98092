"""Fused linear cross-entropy on torch tensors with autograd: lmcore.torch.linear_cross_entropy and the
nn.Module LinearCrossEntropyLoss, under the argument names of PyTorch 2.13.

    loss_fn = lmcore.torch.LinearCrossEntropyLoss(H, V, z_loss=1e-4)   # holds an nn.Parameter [V, H]
    loss = loss_fn(hidden, target)                                      # hidden [..., H], target [...]
    loss = lmcore.torch.linear_cross_entropy(hidden, emb.weight, target)  # tied to an embedding

Definitions are lmcore's (lmcore/loss/cross_entropy.h): torch's F.cross_entropy of
F.linear(input, linear_weight, linear_bias), after an optional softcap c * tanh(x / c), plus the
z-loss z_loss * logsumexp^2 (a plain mean over the counted tokens for "mean"). The [N, V] logits
never exist: for "mean" and "sum" the forward computes the gradients from the same tiles of logits
(an incoming gradient only scales them), for "none" it keeps the per-token logsumexp and the backward
recomputes the tiles. With gradients wanted, the forward of "mean"/"sum" therefore costs about what a
forward + backward costs; under torch.no_grad() it is a forward only. Arithmetic is f32 for f32/bf16/f16 inputs and f64 for f64 inputs (torch.autograd.gradcheck
runs on the f64 path). The loss comes back in the input's dtype; gradients reach input, linear_weight
and linear_bias for every reduction and any incoming gradient (first order only).
"""
import math

import torch
from torch import nn

from lmcore import _lmcore
from lmcore.torch._convert import _FLOATS, check_tensor, from_lmcore, to_lmcore

_REDUCTIONS = ("mean", "sum", "none")
_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _options(reduction, weight, ignore_index, label_smoothing, z_loss, softcap, dtype):
    o = dict(reduction=reduction, ignore_index=int(ignore_index), label_smoothing=float(label_smoothing),
             z_loss=float(z_loss), softcap=0.0 if softcap is None else float(softcap),
             accumulate="f64" if dtype == torch.float64 else "f32")
    if weight is not None:
        o["class_weight"] = to_lmcore(weight, "weight")
    return o


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward and backward of the fused loss. For "mean" and "sum" with gradients wanted (`fused`), the
    forward computes the gradients too, for an incoming gradient of 1, from the same tiles of logits
    (linear_cross_entropy_with_grad: 3 products per tile instead of 4 over two passes); the loss is
    linear in them, so the backward only scales them by the incoming gradient. "none" cannot: its
    d_weight sums per-token gradients that are only known in the backward."""

    @staticmethod
    def forward(ctx, hidden, linear_weight, linear_bias, target, options, fused):
        # hidden [N, H], linear_weight [V, H], linear_bias [V] or None, target [N] i64
        kw = dict(options)
        if linear_bias is not None:
            kw["bias"] = to_lmcore(linear_bias, "linear_bias")
        h, w, t = to_lmcore(hidden, "input"), to_lmcore(linear_weight, "linear_weight"), to_lmcore(target, "target")
        ctx.options, ctx.fused = options, fused
        if fused:
            acc = torch.float64 if options["accumulate"] == "f64" else torch.float32
            # The kernel ADDS into d_weight and d_bias: zeros in the accumulation dtype.
            d_weight = torch.zeros(linear_weight.shape, dtype=acc) if ctx.needs_input_grad[1] else None
            d_bias = torch.zeros(linear_bias.shape, dtype=acc) if linear_bias is not None and ctx.needs_input_grad[2] \
                else None
            loss, _, _, d_hidden = _lmcore.linear_cross_entropy_with_grad(
                h, w, t, grad_loss=to_lmcore(torch.ones((), dtype=acc), "grad"),
                d_weight=None if d_weight is None else to_lmcore(d_weight, "d_weight"),
                d_bias=None if d_bias is None else to_lmcore(d_bias, "d_bias"), **kw)
            ctx.grads = (from_lmcore(d_hidden), d_weight, d_bias)
            ctx.save_for_backward(hidden, linear_weight, linear_bias, target)
            ctx.lse = None  # a second backward (retain_graph) recomputes it
            return from_lmcore(loss).to(hidden.dtype)
        loss, _, lse = _lmcore.linear_cross_entropy(h, w, t, **kw)
        ctx.save_for_backward(hidden, linear_weight, linear_bias, target)
        ctx.lse = from_lmcore(lse)  # [N] in the accumulation dtype, not a function of anything differentiable
        return from_lmcore(loss).to(hidden.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        hidden, linear_weight, linear_bias, target = ctx.saved_tensors
        if ctx.fused and ctx.grads is not None:
            # The first backward hands the forward's gradients over, scaled in place (no second [V, H]
            # buffer); a later one (retain_graph=True) recomputes them below.
            out = []
            for g, p, needed in zip(ctx.grads, (hidden, linear_weight, linear_bias), ctx.needs_input_grad[:3]):
                out.append(None if g is None or not needed else g.mul_(grad.to(g.dtype)).to(p.dtype))
            ctx.grads = None
            return (*out, None, None, None)
        acc = torch.float64 if ctx.options["accumulate"] == "f64" else torch.float32
        kw = dict(ctx.options)
        if linear_bias is not None:
            kw["bias"] = to_lmcore(linear_bias, "linear_bias")
        d_weight = torch.zeros(linear_weight.shape, dtype=acc) if ctx.needs_input_grad[1] else None
        d_bias = torch.zeros(linear_bias.shape, dtype=acc) if linear_bias is not None and ctx.needs_input_grad[2] else None
        d_hidden = _lmcore.linear_cross_entropy_backward(
            to_lmcore(hidden, "input"), to_lmcore(linear_weight, "linear_weight"), to_lmcore(target, "target"),
            grad_loss=to_lmcore(grad.detach().to(acc).contiguous(), "grad"),
            lse=None if ctx.lse is None else to_lmcore(ctx.lse, "lse"),
            d_weight=None if d_weight is None else to_lmcore(d_weight, "d_weight"),
            d_bias=None if d_bias is None else to_lmcore(d_bias, "d_bias"), **kw)
        d_hidden = from_lmcore(d_hidden) if ctx.needs_input_grad[0] else None
        if d_weight is not None:
            d_weight = d_weight.to(linear_weight.dtype)
        if d_bias is not None:
            d_bias = d_bias.to(linear_bias.dtype)
        return d_hidden, d_weight, d_bias, None, None, None


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None):
    """Cross-entropy of F.linear(input, linear_weight, linear_bias) without materialising the logits.

    input [..., H] (f32, f64, bf16, f16), linear_weight [V, H] and linear_bias [V] of input's dtype,
    target [...] integer class indices (ignore_index: not counted), weight [V] class weights.
    Returns a scalar for "mean"/"sum" and a tensor of target's shape for "none".
    """
    check_tensor(input, "input", _FLOATS)
    check_tensor(linear_weight, "linear_weight", _FLOATS)
    check_tensor(target, "target", _INTS)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction: expected one of 'mean', 'sum', 'none', found {reduction!r}")
    if input.dim() < 1:
        raise ValueError("input: expected shape [..., H] with at least one dimension, found a scalar")
    if linear_weight.dim() != 2 or linear_weight.shape[1] != input.shape[-1]:
        raise ValueError(f"linear_weight: expected shape [V, {input.shape[-1]}] (input is {list(input.shape)}), "
                         f"found {list(linear_weight.shape)}")
    if linear_weight.dtype != input.dtype:
        raise TypeError(f"linear_weight: expected the dtype of input ({input.dtype}), found {linear_weight.dtype}")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise ValueError(f"target: expected shape {list(input.shape[:-1])} (input's leading dimensions), "
                         f"found {list(target.shape)}")
    V = linear_weight.shape[0]
    if linear_bias is not None:
        check_tensor(linear_bias, "linear_bias", (input.dtype,))
        if tuple(linear_bias.shape) != (V,):
            raise ValueError(f"linear_bias: expected shape [{V}], found {list(linear_bias.shape)}")
    if weight is not None:
        check_tensor(weight, "weight", _FLOATS)
        if tuple(weight.shape) != (V,):
            raise ValueError(f"weight: expected shape [{V}] (one weight per class), found {list(weight.shape)}")
        if weight.requires_grad:
            raise ValueError("weight: class weights are constants here (as in F.cross_entropy's backward); "
                             "found a tensor that requires grad")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap: expected None or a number > 0, found {softcap}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing: expected a number in [0, 1], found {label_smoothing}")
    if not z_loss >= 0.0:
        raise ValueError(f"z_loss: expected a number >= 0, found {z_loss}")
    options = _options(reduction, weight, ignore_index, label_smoothing, z_loss, softcap, input.dtype)
    lead = target.shape
    wants_grad = input.requires_grad or linear_weight.requires_grad or (linear_bias is not None and
                                                                         linear_bias.requires_grad)
    fused = torch.is_grad_enabled() and wants_grad and reduction != "none"
    loss = _LinearCrossEntropy.apply(input.reshape(target.numel(), input.shape[-1]), linear_weight, linear_bias,
                                     target.reshape(-1).to(torch.int64), options, fused)
    return loss.reshape(lead) if reduction == "none" else loss


class LinearCrossEntropyLoss(nn.Module):
    """nn.Linear(in_features, num_classes, bias) followed by nn.CrossEntropyLoss, fused.

    Holds the projection as the nn.Parameter `linear_weight` [num_classes, in_features] (and
    `linear_bias` [num_classes] when bias=True), initialised as nn.Linear's; `weight` is the class-weight
    buffer, as in nn.CrossEntropyLoss. Tie it to an embedding by assigning the embedding's parameter:
    `loss_fn.linear_weight = emb.weight` (its gradient then accumulates from both uses).
    """

    def __init__(self, in_features, num_classes, bias=False, reduction="mean", weight=None, ignore_index=-100,
                 label_smoothing=0.0, z_loss=0.0, softcap=None, device=None, dtype=None):
        super().__init__()
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device: expected cpu, found {device}")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction: expected one of 'mean', 'sum', 'none', found {reduction!r}")
        self.in_features, self.num_classes = int(in_features), int(num_classes)
        self.reduction, self.ignore_index = reduction, ignore_index
        self.label_smoothing, self.z_loss, self.softcap = label_smoothing, z_loss, softcap
        self.linear_weight = nn.Parameter(torch.empty(self.num_classes, self.in_features, dtype=dtype))
        self.linear_bias = nn.Parameter(torch.empty(self.num_classes, dtype=dtype)) if bias else None
        self.register_buffer("weight", weight)
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Linear's initialisation: U(-1/sqrt(in), 1/sqrt(in)) for both.
        nn.init.kaiming_uniform_(self.linear_weight, a=math.sqrt(5))
        if self.linear_bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.linear_bias, -bound, bound)

    def forward(self, input, target):
        return linear_cross_entropy(input, self.linear_weight, target, linear_bias=self.linear_bias,
                                    weight=self.weight, reduction=self.reduction, ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing, z_loss=self.z_loss, softcap=self.softcap)

    def extra_repr(self):
        return (f"in_features={self.in_features}, num_classes={self.num_classes}, bias={self.linear_bias is not None}, "
                f"reduction={self.reduction!r}, z_loss={self.z_loss}, softcap={self.softcap}")
