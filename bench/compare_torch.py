#!/usr/bin/python3
"""Times lmcore's core ops against torch 1.13 on the same inputs and the same thread count.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/compare_torch.py [--quick] [--threads N] [--only OP]

Inputs are torch tensors; lmcore reads them zero-copy through DLPack, so both libraries see the same
memory. Each op allocates its output in both libraries. Times are medians over several runs after a
warm-up. `torch/lmcore` > 1 means lmcore is faster.
"""
import argparse
import statistics
import time

import torch
import torch.utils.dlpack

import lmcore


def lm(t):
    return lmcore.from_dlpack(torch.utils.dlpack.to_dlpack(t))


def median_seconds(fn, repeats, budget_s=3.0):
    fn()  # warm-up: page faults, thread start-up, lazy initialisation
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return statistics.median(times)


def cases(quick):
    g = torch.Generator().manual_seed(0)
    scale = 4 if quick else 1
    rows, cols = 1024 // scale, 16384
    x = torch.randn(rows, cols, generator=g)
    xb = x.bfloat16()
    flat = torch.randn(16 * 1024 * 1024 // scale, generator=g)
    xs = torch.randn(64 // scale, 65536, generator=g)
    xi = torch.randint(-2**40, 2**40, (64 // scale, 65536), generator=g)
    V, D = 50257, 768
    ids = torch.randint(0, V, (8 // min(scale, 2), 1024), generator=g)
    grad = torch.randn(*ids.shape, D, generator=g)
    gradb = grad.bfloat16()
    lx, lxb, lflat, lxs, lxi = lm(x), lm(xb), lm(flat), lm(xs), lm(xi)
    lids, lgrad, lgradb = lm(ids), lm(grad), lm(gradb)
    return [
        ("sum dim=-1", f"f32 {list(x.shape)}", lambda: lmcore.sum(lx, dim=-1), lambda: torch.sum(x, -1)),
        ("sum dim=-1", f"bf16 {list(xb.shape)}", lambda: lmcore.sum(lxb, dim=-1), lambda: torch.sum(xb, -1)),
        ("sum dim=0", f"f32 {list(x.shape)}", lambda: lmcore.sum(lx, dim=0), lambda: torch.sum(x, 0)),
        ("sum all", f"f32 [{flat.numel()}]", lambda: lmcore.sum(lflat), lambda: torch.sum(flat)),
        ("sort dim=-1", f"f32 {list(xs.shape)}", lambda: lmcore.sort(lxs, dim=-1), lambda: torch.sort(xs, dim=-1)),
        ("sort stable", f"f32 {list(xs.shape)}", lambda: lmcore.sort(lxs, dim=-1, stable=True),
         lambda: torch.sort(xs, dim=-1, stable=True)),
        ("sort dim=-1", f"i64 {list(xi.shape)}", lambda: lmcore.sort(lxi, dim=-1), lambda: torch.sort(xi, dim=-1)),
        ("embedding backward", f"f32 ids {list(ids.shape)} V={V} D={D}",
         lambda: lmcore.embedding_backward(lgrad, lids, V),
         lambda: torch.ops.aten.embedding_dense_backward(grad, ids, V, -1, False)),
        ("embedding backward", f"bf16 ids {list(ids.shape)} V={V} D={D}",
         lambda: lmcore.embedding_backward(lgradb, lids, V),
         lambda: torch.ops.aten.embedding_dense_backward(gradb, ids, V, -1, False)),
        ("cast f32->bf16", f"[{flat.numel()}]", lambda: lmcore.cast(lflat, "bf16"), lambda: flat.to(torch.bfloat16)),
    ] + lce_cases(quick, g)


def lce_cases(quick, g):
    """Linear cross-entropy forward + backward in bf16: lmcore's fused kernel (matrix units where the CPU
    has them, d_weight summed in f32) against torch's unfused bf16 path: logits = hidden @ weight^T in
    bf16, F.cross_entropy on those bf16 logits (faster here than upcasting them to f32 first), and
    autograd for d_hidden and d_weight. Each side allocates its own gradients."""
    N, H = (1024, 1024) if quick else (4096, 1024)
    out = []
    for V in (32000,) if quick else (32000, 128256):
        hidden = torch.randn(N, H, generator=g).bfloat16()
        weight = (torch.randn(V, H, generator=g) * 0.05).bfloat16()
        target = torch.randint(0, V, (N,), generator=g)
        lh, lw, lt = lm(hidden), lm(weight), lm(target)

        def fused(lh=lh, lw=lw, lt=lt, V=V):
            lmcore.linear_cross_entropy_with_grad(lh, lw, lt, d_weight=torch.zeros(V, H))

        def unfused(hidden=hidden, weight=weight, target=target):
            h = hidden.detach().requires_grad_()
            w = weight.detach().requires_grad_()
            torch.nn.functional.cross_entropy(h @ w.t(), target).backward()

        out.append(("linear cross-entropy fwd+bwd", f"bf16 N={N} H={H} V={V}", fused, unfused))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    ap.add_argument("--threads", type=int, default=0, help="threads for both (default: lmcore's count)")
    ap.add_argument("--only", default="", help="run only the rows whose op contains this text (default: all)")
    args = ap.parse_args()
    threads = args.threads or lmcore.num_threads()
    lmcore.set_num_threads(threads)
    torch.set_num_threads(threads)
    repeats = 5 if args.quick else 11
    rows = []
    for op, shape, f_lm, f_torch in cases(args.quick):
        if args.only not in op:
            continue
        t_lm = median_seconds(f_lm, repeats)
        t_torch = median_seconds(f_torch, repeats)
        rows.append((op, shape, t_lm * 1e3, t_torch * 1e3, t_torch / t_lm))
    print(f"lmcore {lmcore.__version__} ({lmcore.simd_target()}) vs torch {torch.__version__}, "
          f"{threads} threads each; median ms; ratio = torch/lmcore (> 1: lmcore faster)")
    header = ("op", "input", "lmcore ms", "torch ms", "torch/lmcore")
    widths = [max(len(str(r[i])) if i < 2 else 10 for r in rows + [header]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for op, shape, a, b, r in rows:
        print("  ".join([op.ljust(widths[0]), shape.ljust(widths[1]), f"{a:10.3f}", f"{b:10.3f}", f"{r:10.2f}"]))


if __name__ == "__main__":
    main()
