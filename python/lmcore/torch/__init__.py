"""lmcore's kernels on torch tensors, with autograd, under PyTorch 2.13's names.

    import lmcore.torch as lt
    bm = lt.create_block_mask(lambda b, h, q, kv: q >= kv, None, None, L, L)
    out = lt.flex_attention(q, k, v, score_mod=lt.alibi(slopes), block_mask=bm)
    loss = lt.LinearCrossEntropyLoss(H, V)(hidden, target)      # fused projection + cross-entropy
    state = lt.load("model.safetensors")                        # dict[str, torch.Tensor]

Code written for torch.nn.attention.flex_attention and torch.nn.LinearCrossEntropyLoss runs by
changing the import. Tensors are handed to the C++ kernels zero-copy (lmcore.torch._convert says
how); the arithmetic stays in C++.
"""
from lmcore.torch._attention import ScoreMod, alibi, flex_attention, relative_position_bias, softcap  # noqa: F401
from lmcore.torch._convert import from_lmcore, to_lmcore  # noqa: F401
from lmcore.torch._io import load, save  # noqa: F401
from lmcore.torch._loss import LinearCrossEntropyLoss, linear_cross_entropy  # noqa: F401
from lmcore.torch._masks import (BlockMask, and_masks, create_block_mask, create_mask, noop_mask,  # noqa: F401
                                 or_masks)

__all__ = ["flex_attention", "create_block_mask", "create_mask", "BlockMask", "and_masks", "or_masks", "noop_mask",
           "alibi", "relative_position_bias", "softcap", "ScoreMod", "LinearCrossEntropyLoss", "linear_cross_entropy",
           "load", "save", "to_lmcore", "from_lmcore"]
