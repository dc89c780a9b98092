"""torch 1.13's RMSNorm written in torch ops, forward + backward: the peer of `lmcore bench codegen`.

    /usr/bin/python3 bench/torch_rmsnorm.py --threads 2 --rows 4096 --hidden 4096 --dtype f32

y = x * rsqrt(mean(x^2, -1) + eps) * w, the way Hugging Face's LlamaRMSNorm computes it (in f32, the
result cast back to the input dtype), then y.backward(dy) through autograd. Prints one JSON object:
{"seconds": best seconds of one forward + backward, ...}. Best of several samples (shared machine).
"""
import argparse
import json
import time

import torch


def best_seconds(fn, budget_s):
    fn()
    best = float("inf")
    start = time.perf_counter()
    samples = 0
    while samples < 3 or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        samples += 1
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--budget", type=float, default=1.0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.rows, a.hidden, generator=g).to(dt).requires_grad_(True)
    w = torch.randn(a.hidden, generator=g).requires_grad_(True)
    dy = torch.randn(a.rows, a.hidden, generator=g).to(dt)

    def step():
        x.grad = None
        w.grad = None
        h = x.float()
        y = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * w).to(dt)
        y.backward(dy)

    print(json.dumps({"seconds": best_seconds(step, a.budget), "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
