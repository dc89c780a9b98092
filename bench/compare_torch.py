#!/usr/bin/python3
"""Times lmcore's core ops against torch 1.13 on the same inputs and the same thread count.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/compare_torch.py [--quick] [--threads N] [--only OP]

A second table compares lmcore.torch (the drop-in ops with autograd) with the plain-torch code they
replace: each side runs in a fresh process of its own (same thread count), which reports the median
time and its peak RSS growth (peak during the first call minus the RSS once its inputs exist).

Inputs are torch tensors; lmcore reads them zero-copy through DLPack, so both libraries see the same
memory. Each op allocates its output in both libraries. Times are medians over several runs after a
warm-up; the two libraries run in alternating blocks of calls (~30 ms each, the first call of a block
not counted), so that load from other processes on a shared machine falls on both alike. `torch/lmcore` > 1 means lmcore is faster.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.utils.dlpack

import lmcore


def lm(t):
    return lmcore.from_dlpack(torch.utils.dlpack.to_dlpack(t))


def median_seconds_alternating(fn_a, fn_b, max_repeats, budget_s=3.0, block_s=0.03):
    """Medians of fn_a's and fn_b's times, run in alternating blocks of calls (about block_s each)
    until max_repeats each or the budget is spent (at least one each): fast ops get many samples,
    and load from other processes falls on both alike. The first call of a block is not counted:
    torch's OpenMP workers keep spinning on the cores for a while after a torch call, and the next
    library's first call would be timed against them."""
    ta, tb = [], []
    start = time.perf_counter()
    while len(ta) < max_repeats:
        for fn, times in ((fn_a, ta), (fn_b, tb)):
            fn()  # the block's first call: warm-up
            t_block = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                if time.perf_counter() - t_block > block_s:
                    break
        if time.perf_counter() - start > budget_s:
            break
    return statistics.median(ta), statistics.median(tb)


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


def torch_bf16_matmul_gflops():
    """torch's bf16 matmul rate on a small product: without AVX-512 BF16, torch 1.13 multiplies bf16 in
    plain loops (1.6 GFLOPS on a Zen 3 with AVX2, ~300x slower than with it)."""
    a = torch.randn(256, 1024).bfloat16()
    b = torch.randn(1024, 1024).bfloat16()
    a @ b.t()
    t0 = time.perf_counter()
    a @ b.t()
    return 2 * 256 * 1024 * 1024 / (time.perf_counter() - t0) / 1e9


# A torch call estimated to take longer than this is not timed (its row says so, with the estimate).
TORCH_CALL_LIMIT_S = 20.0


def lce_cases(quick, g):
    """Linear cross-entropy forward + backward in bf16: lmcore's fused kernel (matrix units where the CPU
    has them, d_weight summed in f32) against torch's unfused bf16 path: logits = hidden @ weight^T in
    bf16, F.cross_entropy on those bf16 logits (faster here than upcasting them to f32 first), and
    autograd for d_hidden and d_weight. Each side allocates its own gradients. Where torch's bf16 matmul
    rate says one call would take longer than TORCH_CALL_LIMIT_S (no AVX-512 BF16: minutes), torch's
    side is not timed but estimated (unfused_lce_seconds), when its row runs."""
    N, H = (1024, 1024) if quick else (4096, 1024)
    gflops = torch_bf16_matmul_gflops()
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

        if 3 * 2 * N * H * V / (gflops * 1e9) > TORCH_CALL_LIMIT_S:
            unfused = Estimate(lambda N=N, V=V: unfused_lce_seconds(N, H, V, g),
                               f"torch's bf16 matmul runs at {gflops:.1f} GFLOPS here; the estimate scales "
                               f"one timed call at N={LCE_PROBE[0]} V={LCE_PROBE[1]} by N V")
        out.append(("linear cross-entropy fwd+bwd", f"bf16 N={N} H={H} V={V}", fused, unfused))
    return out


LCE_PROBE = (256, 1024)  # (N, V) of the call timed to estimate an untimeable one


def unfused_lce_seconds(N, H, V, g):
    """torch's unfused bf16 fwd+bwd at (N, H, V) from one call timed at LCE_PROBE: its three products
    and the cross-entropy grow as N V at fixed H (on a Zen 3 the product rate alone predicted 2x the time
    measured at N=256 V=4000, since the backward's products run faster than the forward's)."""
    n, v = LCE_PROBE
    hidden = torch.randn(n, H, generator=g).bfloat16().requires_grad_()
    weight = (torch.randn(v, H, generator=g) * 0.05).bfloat16().requires_grad_()
    target = torch.randint(0, v, (n,), generator=g)
    t0 = time.perf_counter()
    torch.nn.functional.cross_entropy(hidden @ weight.t(), target).backward()
    return (time.perf_counter() - t0) * (N * V) / (n * v)


class Estimate:
    """Stands for a torch call too slow to time: seconds() estimates it (only for rows that run), why
    says how."""

    def __init__(self, seconds, why):
        self.seconds, self.why = seconds, why


def median_seconds(fn, max_repeats, budget_s=3.0):
    """Median time of fn over up to max_repeats calls within the budget (at least one), after a warm-up."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_repeats and (not times or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---- lmcore.torch vs plain torch, one process per side ----

def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def api_rows(quick):
    """(name, input description, builder(side, path) -> callable); every builder makes its inputs."""
    rows = []
    H, D = 4, 64
    for L, W in ((4096, 256), (4096, 1024), (8192, 256), (8192, 1024)):
        if quick and L > 4096:
            continue
        rows.append(("flex_attention fwd+bwd", f"f32 B=1 H={H} L={L} D={D} window {W}, ALiBi slopes trained",
                     lambda side, path, L=L, W=W: attention_case(side, H, L, D, W)))
    N, Hd = 2048, 1024
    for V in (32000, 128256):
        if quick and V > 32000:
            continue
        rows.append(("LinearCrossEntropyLoss fwd+bwd", f"f32 N={N} H={Hd} V={V}",
                     lambda side, path, V=V: lce_case(side, N, Hd, V)))
    rows.append(("load 1 GiB", "torch zip, 16 x 64 MiB f32", lambda side, path: load_case(side, path, False)))
    rows.append(("load 1 GiB + read all", "torch zip, 16 x 64 MiB f32", lambda side, path: load_case(side, path, True)))
    return rows


def attention_case(side, H, L, D, W):
    import lmcore.torch as lt
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, L, D, generator=g).requires_grad_() for _ in range(3))
    d_out = torch.randn(1, H, L, D, generator=g)
    slopes = torch.tensor(lmcore.ScoreMod.alibi_slopes(H)).requires_grad_()
    params = (q, k, v, slopes)
    if side == "lmcore":
        bm = lt.create_block_mask(lmcore.MaskMod.sliding_window(W), None, None, L, L)

        def attend():
            return lt.flex_attention(q, k, v, score_mod=lt.alibi(slopes), block_mask=bm)
    else:
        qi, kv = torch.arange(L).view(L, 1), torch.arange(L).view(1, L)
        allowed = (kv <= qi) & (qi - kv <= W)
        distance = (kv - qi).float()

        def attend():
            s = q @ k.transpose(-1, -2) / math.sqrt(D) + slopes.view(1, H, 1, 1) * distance
            return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v

    def run():
        for p in params:
            p.grad = None
        attend().backward(d_out)
    return run


def lce_case(side, N, H, V):
    import lmcore.torch as lt
    torch.manual_seed(0)
    hidden = torch.randn(N, H).requires_grad_()
    target = torch.randint(0, V, (N,))
    if side == "lmcore":
        mod = lt.LinearCrossEntropyLoss(H, V)
        loss_of = lambda: mod(hidden, target)
    else:
        lin, ce = torch.nn.Linear(H, V, bias=False), torch.nn.CrossEntropyLoss()
        loss_of = lambda: ce(lin(hidden), target)
    params = [hidden] + list((mod if side == "lmcore" else lin).parameters())

    def run():
        for p in params:
            p.grad = None
        loss_of().backward()
    return run


def load_case(side, path, read_all):
    import lmcore.torch as lt

    def run():
        sd = lt.load(path) if side == "lmcore" else torch.load(path, weights_only=True)
        if read_all:
            for t in sd.values():
                t.sum()
    return run


def child(index, side, quick, threads):
    lmcore.set_num_threads(threads)
    torch.set_num_threads(threads)
    name, _, build = api_rows(quick)[index]
    run = build(side, os.environ.get("LMCORE_BENCH_FILE", ""))
    base = rss_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    peak = rss_kib("VmHWM")
    # Long calls are timed fewer times (the first, cold call is never counted).
    repeats = 1 if first > 5.0 else 3 if first > 1.0 else 7
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(json.dumps({"ms": t * 1e3, "peak_mib": (peak - base) / 1024}))


def api_table(args, threads):
    rows = [(i, r) for i, r in enumerate(api_rows(args.quick)) if args.only in r[0]]
    if not rows:
        return
    path = None
    if any(r[0].startswith("load") for _, r in rows):
        fd, path = tempfile.mkstemp(suffix=".pt", dir=os.environ.get("TMPDIR", "/tmp"))
        os.close(fd)
        g = torch.Generator().manual_seed(0)
        torch.save({f"layer{i}.weight": torch.randn(4096, 4096, generator=g) for i in range(16)}, path)
    try:
        out = []
        for i, (name, shape, _) in rows:
            res = {}
            for side in ("lmcore", "torch"):
                r = subprocess.run([sys.executable, __file__, "--child", str(i), side, "--threads", str(threads)]
                                   + (["--quick"] if args.quick else []), capture_output=True, text=True,
                                   env=dict(os.environ, LMCORE_BENCH_FILE=path or ""))
                if r.returncode != 0:
                    raise SystemExit(f"{name} ({side}) failed:\n{r.stderr[-2000:]}")
                res[side] = json.loads(r.stdout.strip().splitlines()[-1])
            out.append((name, shape, res["lmcore"], res["torch"]))
    finally:
        if path:
            os.unlink(path)
    print(f"\nlmcore.torch vs plain torch, one process per side, {threads} threads each; median ms and peak RSS "
          f"growth (MiB) of a call; speed = torch ms / lmcore ms, memory = torch growth / lmcore growth")
    header = ("op", "input", "lmcore ms", "torch ms", "speed", "lmcore MiB", "torch MiB", "memory")
    w0 = max(len(r[0]) for r in out + [header])
    w1 = max(len(r[1]) for r in out + [header])
    print("  ".join([header[0].ljust(w0), header[1].ljust(w1)] + [h.rjust(10) for h in header[2:]]))
    for name, shape, a, b in out:
        mem = b["peak_mib"] / a["peak_mib"] if a["peak_mib"] > 0.5 else float("inf")
        print("  ".join([name.ljust(w0), shape.ljust(w1), f"{a['ms']:10.1f}", f"{b['ms']:10.1f}",
                         f"{b['ms'] / a['ms']:10.2f}", f"{a['peak_mib']:10.1f}", f"{b['peak_mib']:10.1f}",
                         f"{mem:10.1f}"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    ap.add_argument("--threads", type=int, default=0, help="threads for both (default: lmcore's count)")
    ap.add_argument("--only", default="", help="run only the rows whose op contains this text (default: all)")
    ap.add_argument("--torch-api", choices=["both", "only", "no"], default="both",
                    help="the lmcore.torch table: with the core rows, alone, or not at all (default both)")
    ap.add_argument("--child", nargs=2, metavar=("ROW", "SIDE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = args.threads or lmcore.num_threads()
    if args.child:
        return child(int(args.child[0]), args.child[1], args.quick, threads)
    if args.torch_api == "only":
        return api_table(args, threads)
    lmcore.set_num_threads(threads)
    torch.set_num_threads(threads)
    repeats = 20 if args.quick else 200
    rows, notes = [], []
    chosen = [c for c in cases(args.quick) if args.only in c[0]]
    for k, (op, shape, f_lm, f_torch) in enumerate(chosen):
        print(f"[{k + 1}/{len(chosen)}] {op} {shape}", file=sys.stderr, flush=True)
        if isinstance(f_torch, Estimate):
            t_lm, t_torch = median_seconds(f_lm, repeats), f_torch.seconds()
            notes.append(f"{op} {shape}: torch not timed, ~{t_torch:.0f} s per call estimated ({f_torch.why})")
            rows.append((op, shape, t_lm * 1e3, t_torch * 1e3, t_torch / t_lm, "est."))
            continue
        t_lm, t_torch = median_seconds_alternating(f_lm, f_torch, repeats)
        rows.append((op, shape, t_lm * 1e3, t_torch * 1e3, t_torch / t_lm, ""))
    print(f"lmcore {lmcore.__version__} ({lmcore.simd_target()}) vs torch {torch.__version__}, "
          f"{threads} threads each; median ms; ratio = torch/lmcore (> 1: lmcore faster)")
    header = ("op", "input", "lmcore ms", "torch ms", "torch/lmcore")
    widths = [max(len(str(r[i])) if i < 2 else 10 for r in rows + [header]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for op, shape, a, b, r, mark in rows:
        print("  ".join([op.ljust(widths[0]), shape.ljust(widths[1]), f"{a:10.3f}", f"{b:10.3f}", f"{r:10.2f}"])
              + (f"  {mark}" if mark else ""))
    for note in notes:
        print("est.: " + note)
    if args.torch_api == "both":
        api_table(args, threads)


if __name__ == "__main__":
    main()
