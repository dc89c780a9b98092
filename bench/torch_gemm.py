"""torch 1.13's matrix product, the peer of the low-precision GEMM rows of `lmcore bench core`.

    /usr/bin/python3 bench/torch_gemm.py --threads 2 --dtype bf16 --shapes 2048,2048,2048,0,0 128,128,64,0,1

Each shape is M,N,K,trans_a,trans_b: op(A) [M, K] @ op(B) [K, N] -> [M, N] in the input dtype (torch's
bf16 matmul rounds its f32 result once, as lmcore's does); a transposed operand is a transposed view of a
contiguous tensor. Prints one JSON object: {"seconds": [best seconds per call, one per shape], ...}. Times
are the best of several samples of back-to-back calls (the machine may be shared: the best sample is the
least disturbed one).
"""
import argparse
import json
import time

import torch


def best_seconds(fn, budget_s):
    fn()  # warm-up: primitive creation, page faults, thread start
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(0.02 / once))  # samples of ~20 ms
    best = once
    start = time.perf_counter()
    samples = 0
    while samples < 3 or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
        samples += 1
        if samples >= 200:
            break
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--budget", type=float, default=0.5, help="seconds of sampling per shape")
    p.add_argument("--shapes", nargs="+", required=True, help="M,N,K,trans_a,trans_b")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    g = torch.Generator().manual_seed(0)
    out = []
    for s in a.shapes:
        m, n, k, ta, tb = (int(x) for x in s.split(","))
        x = torch.rand(k, m, generator=g).to(dt).t() if ta else torch.rand(m, k, generator=g).to(dt)
        y = torch.rand(n, k, generator=g).to(dt).t() if tb else torch.rand(k, n, generator=g).to(dt)
        out.append(best_seconds(lambda: torch.matmul(x, y), a.budget))
    print(json.dumps({"seconds": out, "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
