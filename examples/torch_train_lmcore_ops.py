#!/usr/bin/python3
"""Trains a small torch model whose attention and loss are lmcore's, and checks it against plain torch.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_train_lmcore_ops.py [--steps 10] [--check]

The model: token embedding -> one attention block (flex attention with trainable ALiBi slopes and a
sliding-window block mask) -> LayerNorm -> a linear cross-entropy tied to the embedding. With
ops="lmcore" the attention is lmcore.torch.flex_attention and the loss lmcore.torch.linear_cross_entropy;
with ops="torch" the same arithmetic is written in plain torch ops (dense masked softmax, F.linear +
F.cross_entropy). Everything else (parameters, AdamW, autograd) is ordinary torch, so the two agree
step by step; --check trains both from the same initialisation and prints the largest differences.

The task is a toy: predict the token `shift` positions back, which one attention head with ALiBi
and a window wider than `shift` can learn.
"""
import argparse
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

import lmcore
import lmcore.torch as lt


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, seq_len=64, window=16, ops="lmcore"):
        super().__init__()
        if ops not in ("lmcore", "torch"):
            raise ValueError(f"ops: expected 'lmcore' or 'torch', found {ops!r}")
        self.vocab, self.heads, self.window, self.ops = vocab, heads, window, ops
        self.emb = nn.Embedding(vocab, dim)
        nn.init.normal_(self.emb.weight, std=0.1)  # tied to the output: logits of order 1 at the start
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm = nn.LayerNorm(dim)
        self.slopes = nn.Parameter(torch.tensor(lmcore.ScoreMod.alibi_slopes(heads)))
        # causal and q - kv <= window (lmcore.MaskMod.sliding_window's definition), written as PyTorch would
        w = window
        self.block_mask = lt.create_block_mask(lambda b, h, q, kv: (kv <= q) & (q - kv <= w), None, None, seq_len,
                                               seq_len, BLOCK_SIZE=16)

    def attention(self, q, k, v):
        # q, k, v [B, H, L, hd]
        if self.ops == "lmcore":
            return lt.flex_attention(q, k, v, score_mod=lt.alibi(self.slopes), block_mask=self.block_mask)
        L = q.shape[2]
        qi, kv = torch.arange(L).view(L, 1), torch.arange(L).view(1, L)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        s = s + self.slopes.view(1, -1, 1, 1) * (kv - qi).to(s.dtype)
        s = s.masked_fill(~((kv <= qi) & (qi - kv <= self.window)), float("-inf"))
        return torch.softmax(s, -1) @ v

    def forward(self, ids, targets):
        B, L = ids.shape
        x = self.emb(ids)  # [B, L, C]
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, -1).permute(2, 0, 3, 1, 4)  # strided views
        a = self.attention(q, k, v).transpose(1, 2).reshape(B, L, -1)
        x = self.norm(x + self.proj(a))
        if self.ops == "lmcore":  # tied: the embedding's parameter is the projection
            return lt.linear_cross_entropy(x, self.emb.weight, targets)
        return F.cross_entropy(F.linear(x, self.emb.weight).reshape(B * L, -1), targets.reshape(-1))


def batch(step, batch_size, seq_len, vocab, shift, seed=0):
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    ids = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    targets = torch.roll(ids, shift, dims=1)
    targets[:, :shift] = -100  # nothing to copy yet: ignored
    return ids, targets


def train(model, steps, lr=1e-2, batch_size=4, shift=3, log=None):
    """AdamW for `steps` steps; returns the losses."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    L = model.block_mask.shape[2]
    for step in range(steps):
        ids, targets = batch(step, batch_size, L, model.vocab, shift)
        loss = model(ids, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log:
            log(f"step {step:4d}  loss {loss.item():.5f}  slopes {[round(s, 4) for s in model.slopes.tolist()]}")
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="AdamW steps (default 10)")
    ap.add_argument("--lr", type=float, default=1e-2, help="learning rate (default 0.01)")
    ap.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (default 64)")
    ap.add_argument("--window", type=int, default=16, help="sliding window (default 16)")
    ap.add_argument("--seed", type=int, default=0, help="initialisation seed (default 0)")
    ap.add_argument("--check", action="store_true", help="also train plain torch from the same start and compare")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    model = TinyLM(seq_len=args.seq_len, window=args.window, ops="lmcore")
    reference = copy.deepcopy(model)
    reference.ops = "torch"
    losses = train(model, args.steps, lr=args.lr, log=print)
    if args.check:
        ref_losses = train(reference, args.steps, lr=args.lr)
        print(f"max |loss diff| over {args.steps} steps: {max(abs(a - b) for a, b in zip(losses, ref_losses)):.3g}")
        for (name, p), (_, r) in zip(model.named_parameters(), reference.named_parameters()):
            print(f"  {name:12s} max |diff| {(p - r).abs().max().item():.3g}  (max |value| {r.abs().max().item():.3g})")


if __name__ == "__main__":
    main()
