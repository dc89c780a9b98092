"""Block masks for lmcore.torch.flex_attention with the surface of torch.nn.attention.flex_attention:
create_block_mask, BlockMask, create_mask, and_masks, or_masks, noop_mask.

A mask_mod is either a Python callable with PyTorch's signature mask_mod(b, h, q_idx, kv_idx) -> bool,
or an lmcore.MaskMod (built-ins such as lmcore.MaskMod.sliding_window(256) classify whole blocks in
closed form and never form the dense mask).

A callable is first evaluated once on broadcast index tensors (b [B,1,1,1], h [1,H,1,1], q_idx
[1,1,L,1], kv_idx [1,1,1,S]), as PyTorch traces it; the resulting bool tensor (only as large as the
dimensions it depends on) becomes an lmcore.MaskMod.from_tensor. A callable that cannot run on tensors
(Python `if` on an index, say) falls back to one call per element with 0-d tensors, through lmcore's
callable MaskMod: correct, but slow.
"""
import torch

from lmcore import _lmcore
from lmcore.torch._convert import to_lmcore

# Largest dense mask (elements) a callable is evaluated into at once; beyond it, element by element.
_DENSE_LIMIT = 1 << 30


def noop_mask(b, h, q_idx, kv_idx):
    """Every (q, kv) pair attends (PyTorch's noop_mask)."""
    return torch.ones((), dtype=torch.bool)


class _Composed:
    """and_masks / or_masks of several mask_mods: callable with PyTorch's signature, and resolved part by
    part into lmcore MaskMods by create_block_mask (so built-in parts keep their closed form)."""

    def __init__(self, op, parts):
        self.op, self.parts = op, parts

    def __call__(self, b, h, q_idx, kv_idx):
        out = None
        for p in self.parts:
            r = _call_part(p, b, h, q_idx, kv_idx)
            out = r if out is None else (out & r if self.op == "and" else out | r)
        return out

    def __repr__(self):
        return f"{self.op}_masks({', '.join(getattr(p, '__name__', repr(p)) for p in self.parts)})"


def _call_part(p, b, h, q_idx, kv_idx):
    if isinstance(p, _lmcore.MaskMod):
        return _maskmod_on_tensors(p, b, h, q_idx, kv_idx)
    return torch.as_tensor(p(b, h, q_idx, kv_idx), dtype=torch.bool)


def _maskmod_on_tensors(m, b, h, q_idx, kv_idx):
    """An lmcore.MaskMod evaluated on broadcastable index tensors (through its dense table)."""
    b, h, q_idx, kv_idx = (torch.as_tensor(x) for x in (b, h, q_idx, kv_idx))
    b, h, q_idx, kv_idx = torch.broadcast_tensors(b, h, q_idx, kv_idx)
    if b.numel() == 0:
        return torch.zeros(b.shape, dtype=torch.bool)
    dense = torch.from_numpy(m.dense(int(b.max()) + 1, int(h.max()) + 1, int(q_idx.max()) + 1, int(kv_idx.max()) + 1))
    return dense[b, h, q_idx, kv_idx]


def _check_mods(mods, name):
    if not mods:
        raise ValueError(f"{name}: expected at least one mask_mod, found none")
    for i, m in enumerate(mods):
        if not (callable(m) or isinstance(m, _lmcore.MaskMod)):
            raise TypeError(f"{name}: mask_mod {i} must be callable or an lmcore.MaskMod, found {type(m).__name__}")


def and_masks(*mask_mods):
    """A mask_mod allowing (q, kv) where every one of mask_mods does."""
    _check_mods(mask_mods, "and_masks")
    return _Composed("and", list(mask_mods))


def or_masks(*mask_mods):
    """A mask_mod allowing (q, kv) where any one of mask_mods does."""
    _check_mods(mask_mods, "or_masks")
    return _Composed("or", list(mask_mods))


def _index_grids(B, H, L, S):
    return (torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1), torch.arange(L).view(1, 1, L, 1),
            torch.arange(S).view(1, 1, 1, S))


def _element_callable(fn):
    """fn(b, h, q_idx, kv_idx) called per element with 0-d int64 tensors, as PyTorch's signature has them."""
    def call(b, h, q, kv):
        return bool(fn(torch.tensor(b), torch.tensor(h), torch.tensor(q), torch.tensor(kv)))
    return call


def to_maskmod(mask_mod, B, H, L, S):
    """(lmcore.MaskMod, dense bool tensor or None) for mask_mod on a B x H x L x S problem."""
    if mask_mod is None or mask_mod is noop_mask:
        return _lmcore.MaskMod.all(), None
    if isinstance(mask_mod, _lmcore.MaskMod):
        return mask_mod, None
    if isinstance(mask_mod, _Composed):
        out = None
        for p in mask_mod.parts:
            m, _ = to_maskmod(p, B, H, L, S)
            out = m if out is None else (out & m if mask_mod.op == "and" else out | m)
        return out, None
    if not callable(mask_mod):
        raise TypeError(f"mask_mod: expected a callable mask_mod(b, h, q_idx, kv_idx) or an lmcore.MaskMod, "
                        f"found {type(mask_mod).__name__}")
    if B * H * L * S <= _DENSE_LIMIT:
        try:
            r = mask_mod(*_index_grids(B, H, L, S))
        except (RuntimeError, TypeError, IndexError):
            r = None  # not written for tensors: element by element below
        if r is not None:
            r = torch.as_tensor(r)
            if r.dtype != torch.bool:
                raise TypeError(f"mask_mod: expected it to return bool, found {r.dtype}")
            while r.dim() < 4:
                r = r.unsqueeze(0)
            try:
                torch.broadcast_shapes(r.shape, (B, H, L, S))
            except RuntimeError:
                raise ValueError(f"mask_mod: its result of shape {list(r.shape)} does not broadcast to "
                                 f"[B, H, Q_LEN, KV_LEN] = {[B, H, L, S]}") from None
            if r.shape[2] == 1 or r.shape[3] == 1:
                r = r.expand(r.shape[0], r.shape[1], L, S)
            r = r.contiguous()
            return _lmcore.MaskMod.from_tensor(to_lmcore(r, "mask")), r
    return _lmcore.MaskMod.from_function(_element_callable(mask_mod)), None


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device="cpu"):
    """The dense bool mask [B, H, Q_LEN, KV_LEN] of a mask_mod (B or H None: 1)."""
    _check_device(device)
    B, H = B or 1, H or 1
    m, dense = to_maskmod(mod_fn, B, H, Q_LEN, KV_LEN)
    if dense is not None:
        return dense.expand(B, H, Q_LEN, KV_LEN).clone()
    return torch.from_numpy(m.dense(B, H, Q_LEN, KV_LEN))


def _check_device(device):
    if torch.device(device).type != "cpu":
        raise ValueError(f"device: lmcore runs on the CPU, expected 'cpu', found {device!r}")


def _block_sizes(BLOCK_SIZE):
    if isinstance(BLOCK_SIZE, int):
        qb = kb = BLOCK_SIZE
    elif isinstance(BLOCK_SIZE, (tuple, list)) and len(BLOCK_SIZE) == 2:
        qb, kb = (int(x) for x in BLOCK_SIZE)
    else:
        raise TypeError(f"BLOCK_SIZE: expected an int or a pair (Q_BLOCK, KV_BLOCK), found {BLOCK_SIZE!r}")
    if qb < 1 or kb < 1:
        raise ValueError(f"BLOCK_SIZE: expected sizes >= 1, found {(qb, kb)}")
    return qb, kb


def _positive(name, v, allow_none):
    if v is None and allow_none:
        return 1
    if not isinstance(v, int) or isinstance(v, bool) or v < (1 if allow_none else 0):
        raise ValueError(f"{name}: expected {'None or an int >= 1' if allow_none else 'an int >= 0'}, found {v!r}")
    return v


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu", BLOCK_SIZE=128, _compile=False):
    """The BlockMask of mask_mod for a B x H x Q_LEN x KV_LEN problem (B or H None: broadcast over it)."""
    _check_device(device)
    B = _positive("B", B, True)
    H = _positive("H", H, True)
    Q_LEN = _positive("Q_LEN", Q_LEN, False)
    KV_LEN = _positive("KV_LEN", KV_LEN, False)
    qb, kb = _block_sizes(BLOCK_SIZE)
    m, dense = to_maskmod(mask_mod, B, H, Q_LEN, KV_LEN)
    lm = _lmcore.create_block_mask(m, B, H, Q_LEN, KV_LEN, qb, kb)
    return BlockMask(lm, mask_mod if mask_mod is not None else noop_mask, m, dense)


class BlockMask:
    """Which blocks of the (q, kv) grid flex_attention computes, as PyTorch's BlockMask shows them.

    shape (B, H, Q_LEN, KV_LEN); BLOCK_SIZE (Q_BLOCK, KV_BLOCK); sparsity() the percentage of skipped
    blocks; to_dense() the int32 block table [B, H, Q_BLOCKS, KV_BLOCKS] (1 = computed); as_tuple();
    to_string(); bm[b] / bm[b, h] slice the batch and heads. Partial blocks evaluate the mask element by
    element, full blocks do not; the kernel never looks at empty ones.
    """

    def __init__(self, lm, mask_mod, maskmod, dense=None):
        self._lm, self.mask_mod, self._maskmod, self._dense = lm, mask_mod, maskmod, dense

    # A BlockMask never changes after it is built: copies (copy.deepcopy of a model holding one) share it.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    # ---- PyTorch's surface ----
    @property
    def shape(self):
        return (self._lm.built_batch, self._lm.built_heads, self._lm.q_len, self._lm.kv_len)

    @property
    def BLOCK_SIZE(self):
        return (self._lm.q_block, self._lm.kv_block)

    @property
    def seq_lengths(self):
        return (self._lm.q_len, self._lm.kv_len)

    def kinds(self):
        """uint8 [B, H, Q_BLOCKS, KV_BLOCKS]: 0 empty, 1 partial, 2 full."""
        k = torch.from_numpy(self._lm.block_kinds())
        return k.expand(self.shape[0], self.shape[1], k.shape[2], k.shape[3])

    def to_dense(self):
        return (self.kinds() != 0).to(torch.int32)

    def sparsity(self):
        """Percentage of blocks skipped."""
        return 100.0 * (1.0 - self._lm.block_density())

    def as_tuple(self, flatten=True):
        """(Q_LEN, KV_LEN, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_num_blocks,
        q_indices, full_q_num_blocks, full_q_indices, Q_BLOCK, KV_BLOCK, mask_mod): block counts int32
        [B, H, rows] and indices int32 [B, H, rows, cols], the listed blocks first in increasing order,
        as PyTorch orders them; the kv_* for partial blocks, full_kv_* for full ones, q_* transposed."""
        k = self.kinds()

        def ordered(dense):
            dense = dense.to(torch.int32)
            return dense.sum(-1, dtype=torch.int32), torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)

        kv_n, kv_i = ordered(k == 1)
        fkv_n, fkv_i = ordered(k == 2)
        q_n, q_i = ordered((k == 1).transpose(-2, -1))
        fq_n, fq_i = ordered((k == 2).transpose(-2, -1))
        return (self._lm.q_len, self._lm.kv_len, kv_n, kv_i, fkv_n, fkv_i, q_n, q_i, fq_n, fq_i, self._lm.q_block,
                self._lm.kv_block, self.mask_mod)

    # The block lists under PyTorch's attribute names (as as_tuple orders them).
    kv_num_blocks = property(lambda self: self.as_tuple()[2])
    kv_indices = property(lambda self: self.as_tuple()[3])
    full_kv_num_blocks = property(lambda self: self.as_tuple()[4])
    full_kv_indices = property(lambda self: self.as_tuple()[5])
    q_num_blocks = property(lambda self: self.as_tuple()[6])
    q_indices = property(lambda self: self.as_tuple()[7])
    full_q_num_blocks = property(lambda self: self.as_tuple()[8])
    full_q_indices = property(lambda self: self.as_tuple()[9])

    def to(self, device):
        """This mask on `device` (only the CPU: lmcore runs there)."""
        _check_device(device)
        return self

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None, full_kv_indices=None,
                       BLOCK_SIZE=128, mask_mod=None, seq_lengths=None, compute_q_blocks=True):
        """A BlockMask from PyTorch's kv block lists: for each (b, h, q block), the first kv_num_blocks
        entries of kv_indices are partial blocks (mask_mod evaluated), those of full_kv_* full blocks."""
        qb, kb = _block_sizes(BLOCK_SIZE)
        for name, t in (("kv_num_blocks", kv_num_blocks), ("kv_indices", kv_indices)):
            if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype == torch.bool:
                found = f"a {t.dtype} tensor" if isinstance(t, torch.Tensor) else type(t).__name__
                raise TypeError(f"{name}: expected an integer torch.Tensor, found {found}")
        if kv_indices.dim() != 4 or tuple(kv_num_blocks.shape) != tuple(kv_indices.shape[:3]):
            raise ValueError(f"kv_indices: expected [B, H, Q_BLOCKS, KV_BLOCKS] with kv_num_blocks [B, H, Q_BLOCKS], "
                             f"found {list(kv_indices.shape)} and {list(kv_num_blocks.shape)}")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise ValueError("full_kv_num_blocks and full_kv_indices: expected both or neither")
        B, H, nq, nk = kv_indices.shape
        L, S = seq_lengths if seq_lengths is not None else (nq * qb, nk * kb)
        if -(-L // qb) != nq or -(-S // kb) > nk:
            raise ValueError(f"seq_lengths: {(L, S)} with BLOCK_SIZE {(qb, kb)} needs {-(-L // qb)} query blocks and "
                             f"at most {nk} key blocks, found {nq} query block rows")
        nk_used = -(-S // kb)
        kinds = torch.zeros(B, H, nq, nk_used, dtype=torch.uint8)

        def mark(num, idx, value, name):
            num, idx = num.to(torch.int64), idx.to(torch.int64)
            if (num < 0).any() or (num > idx.shape[-1]).any():
                raise ValueError(f"{name}: block counts must be in [0, {idx.shape[-1]}], found {num.min()}..{num.max()}")
            used = torch.arange(idx.shape[-1]).view(1, 1, 1, -1) < num.unsqueeze(-1)
            if used.any() and ((idx[used] < 0) | (idx[used] >= nk_used)).any():
                raise ValueError(f"{name}: listed block indices must be in [0, {nk_used}), found "
                                 f"{idx[used].min().item()}..{idx[used].max().item()}")
            b, h, q, j = used.nonzero(as_tuple=True)
            kinds[b, h, q, idx[b, h, q, j]] = value

        mark(kv_num_blocks, kv_indices, 1, "kv_num_blocks")
        if full_kv_num_blocks is not None:
            if tuple(full_kv_indices.shape[:3]) != (B, H, nq):
                raise ValueError(f"full_kv_indices: expected [{B}, {H}, {nq}, ...], found {list(full_kv_indices.shape)}")
            mark(full_kv_num_blocks, full_kv_indices, 2, "full_kv_num_blocks")
        m, dense = to_maskmod(mask_mod, B, H, L, S)
        lm = _lmcore.block_mask_from_kinds(kinds.numpy(), m, L, S, qb, kb)
        return cls(lm, mask_mod if mask_mod is not None else noop_mask, m, dense)

    def __getitem__(self, index):
        """bm[b], bm[b, h], with ints or slices: a BlockMask of those batches and heads."""
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) > 2:
            raise IndexError(f"BlockMask: index with at most (batch, head), found {len(index)} entries")
        B, H = self.shape[0], self.shape[1]
        b_sel = torch.arange(B)[index[0]].reshape(-1)
        h_sel = torch.arange(H)[index[1]].reshape(-1) if len(index) > 1 else torch.arange(H)
        kinds = self.kinds()[b_sel][:, h_sel].contiguous()
        maskmod, dense = self._maskmod, None
        if self._dense is not None:
            d = self._dense
            d = d[b_sel if d.shape[0] > 1 else slice(None)]
            d = d[:, h_sel if d.shape[1] > 1 else slice(None)]
            dense = d.contiguous()
            maskmod = _lmcore.MaskMod.from_tensor(to_lmcore(dense, "mask"))
        elif not _independent(maskmod):
            bl, hl, orig = b_sel.tolist(), h_sel.tolist(), self._maskmod
            maskmod = _lmcore.MaskMod.from_function(lambda b, h, q, kv: orig.allowed(bl[b], hl[h], q, kv))
        L, S = self.seq_lengths
        lm = _lmcore.block_mask_from_kinds(kinds.numpy(), maskmod, L, S, *self.BLOCK_SIZE)
        return BlockMask(lm, self.mask_mod, maskmod, dense)

    def to_string(self, grid_size=(20, 20), limit=4):
        """A picture of the block table per (b, h): '█' full, '░' partial, ' ' skipped (at most grid_size
        blocks shown per side, at most `limit` heads)."""
        k = self.kinds()
        lines = [f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, BLOCK_SIZE={self.BLOCK_SIZE},"
                 f" mask_mod={getattr(self.mask_mod, '__name__', repr(self.mask_mod))})"]
        shown = 0
        for b in range(k.shape[0]):
            for h in range(k.shape[1]):
                if shown == limit:
                    lines.append("...")
                    return "\n".join(lines)
                shown += 1
                lines.append(f"({b}, {h})")
                t = k[b, h, :grid_size[0], :grid_size[1]]
                for row in t.tolist():
                    lines.append("".join("█" if x == 2 else "░" if x == 1 else " " for x in row))
        return "\n".join(lines)

    def __str__(self):
        return self.to_string()

    def __repr__(self):
        return (f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, BLOCK_SIZE={self.BLOCK_SIZE}, "
                f"{self._lm!r})")


def _independent(maskmod):
    return maskmod.independent_of_batch_and_head()
