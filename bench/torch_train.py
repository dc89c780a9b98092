"""torch 1.13 eager training of the reference Llama (tests/python/llama_reference.py), the peer of
`lmcore bench train`: the same model config, batch, thread count and optimizer (AdamW, clipping), with
torch.autocast("cpu", torch.bfloat16) for bf16. Prints one JSON object: tokens/s over the timed steps,
the losses, and the process's peak RSS.

    /usr/bin/python3 bench/torch_train.py --config cfg.json --batch 8 --seq 256 --dtype f32 --steps 3
"""
import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))

import torch  # noqa: E402
from llama_reference import LlamaReference  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = json.load(open(a.config))
    model = LlamaReference(cfg)
    for name, w in model.named_parameters():  # Llama's initialisation, as lmcore's
        if w.dim() == 1:
            torch.nn.init.ones_(w)
        else:
            torch.nn.init.normal_(w, std=0.02)
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq), generator=g)
    y = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq), generator=g)
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model.loss(x, y)
        else:
            loss = model.loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t)
        losses.append(loss.item())
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({"tokens_per_s": a.batch * a.seq / median, "step_s": median, "losses": losses,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
