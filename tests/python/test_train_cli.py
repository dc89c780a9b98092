"""`lmcore train` end to end through the CLI: a sharded run under `lmcore launch` consolidated with
`lmcore convert --consolidate` equals a single-process run of the same global batch, and the
consolidation's usage errors."""
import json
import subprocess

import numpy as np
import pytest

import io_helpers
import lmcore
from io_helpers import run_cli

# The runs train on the built-in corpus: BPE with 4096 tokens, <|endoftext|> = 4095 (builtin_corpus.h).
TINY = {"vocab_size": 4096, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "tie_word_embeddings": False, "eos_token_id": 4095}
STEPS = 6


def train(tmp_path, name, *extra, nproc=1):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    out = tmp_path / name
    args = ["train", "--config", cfg, "--max-steps", STEPS, "--seq-len", 32, "--global-batch", 4,
            "--checkpoint-every", STEPS, "--eval-every", STEPS, "--eval-batches", 1, "--threads", 1,
            "--quiet", "--out", out, *extra]
    if nproc > 1:
        args = ["launch", "--nproc", nproc, "--", io_helpers.CLI, *args]
    r = run_cli(*args, check=False)
    assert r.returncode == 0, r.stderr + r.stdout
    return out


def params(path):
    return {e: np.array(t.numpy(), dtype=np.float64) for e, t in lmcore.load(str(path)).items()}


def test_sharded_run_consolidates_to_the_single_process_model(tmp_path):
    single = train(tmp_path, "single", "--batch-size", 4)
    sharded = train(tmp_path, "sharded", "--fsdp", "--batch-size", 2, nproc=2)
    merged = tmp_path / "merged"
    r = run_cli("convert", "--consolidate", sharded, merged, check=False)
    assert r.returncode == 0, r.stderr
    assert "2 shards" in r.stdout
    ref = params(single / "checkpoints" / f"step_{STEPS:08d}" / "model.safetensors")
    got = params(merged / "model.safetensors")
    assert sorted(ref) == sorted(got)
    # Reduction order differs between one process and two ranks; after 6 AdamW steps (lr 1e-3 scale)
    # the parameters agree to about 1e-6 of their magnitude, while one step's update is ~1e-3.
    worst = max(np.abs(ref[k] - got[k]).max() / max(np.abs(ref[k]).max(), 1e-12) for k in ref)
    print(f"consolidated vs single process: worst relative difference {worst:.3g}")
    assert worst < 5e-5, worst
    assert json.loads((merged / "config.json").read_text())["hidden_size"] == TINY["hidden_size"]


def test_consolidate_errors_name_the_problem(tmp_path):
    r = run_cli("convert", "--consolidate", tmp_path / "missing", tmp_path / "out", check=False)
    assert r.returncode == 1 and "missing" in r.stderr and "does not exist" in r.stderr
    r = run_cli("convert", "--consolidate", tmp_path, tmp_path / "out", "--to", "torch", check=False)
    assert r.returncode == 2 and "--consolidate writes safetensors" in r.stderr


def test_keep_gate_up_option_reaches_the_model(tmp_path):
    """--keep-gate-up: listed in --help with its default, checked, and passed to the model (the report
    says which; the recomputation gives the same bits, so the logged losses are equal)."""
    help_text = run_cli("train", "--help").stdout
    assert "--keep-gate-up" in help_text and "{auto,on,off}=auto" in help_text
    r = run_cli("train", "--keep-gate-up", "sometimes", check=False)
    assert r.returncode == 2 and "--keep-gate-up" in r.stderr
    runs = {}
    for mode in ["auto", "off", "on"]:
        out = train(tmp_path, mode, "--batch-size", 4, "--keep-gate-up", mode)
        report = (out / "report.html").read_text()
        assert ("gate|up recomputed" if mode == "off" else "gate|up kept") in report, mode  # auto: a tiny model keeps it
        events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        runs[mode] = [e["loss"] for e in events if e["event"] == "step"]
    assert len(runs["auto"]) == STEPS and runs["auto"] == runs["off"] == runs["on"]


def test_sizes_past_the_machine_are_refused_at_start_up(tmp_path):
    """Integers past 64 bits and a negative unsigned seed are usage errors (CLI11 alone clamped them
    silently to 2^63 - 1 and wrapped them to 2^64 - 1); a batch whose activations cannot fit in this
    machine's memory fails at once with the sizes, before anything is allocated, instead of filling
    the memory until the kernel kills the process."""
    r = run_cli("train", "--max-steps", "99999999999999999999", check=False)
    assert r.returncode == 2 and "--max-steps: value 99999999999999999999 does not fit a 64-bit integer" in r.stderr
    r = run_cli("train", "--seed", "-1", check=False)
    assert r.returncode == 2 and "--seed: expected a non-negative integer, found -1" in r.stderr
    r = run_cli("generate", "--checkpoint", tmp_path, "--max-tokens", "-3", check=False)
    assert r.returncode == 2 and "--max-tokens: expected a number >= 0, found -3" in r.stderr
    cfg = tmp_path / "long.json"
    cfg.write_text(json.dumps(dict(TINY, max_position_embeddings=1 << 30)))
    r = run_cli("train", "--config", cfg, "--seq-len", 1 << 30, "--max-steps", 1, "--quiet", "--out",
                tmp_path / "run", check=False)
    assert r.returncode == 1, r.stderr
    assert "batch 8 x seq_len 1073741824" in r.stderr and "GiB of memory" in r.stderr, r.stderr


def test_generate_says_when_the_context_cuts_the_tokens_asked_for(tmp_path):
    """Asking for more tokens than max_position_embeddings leaves room for was clamped without a word,
    so a short answer looked like an end-of-text stop."""
    run = train(tmp_path, "single", "--batch-size", 4)

    def generate(max_tokens):  # stdout is the tokens' bytes, which need not be whole UTF-8 characters
        r = subprocess.run([str(io_helpers.CLI), "generate", "--checkpoint", str(run), "--prompt-ids", "1 2",
                            "--max-tokens", str(max_tokens)], capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stderr.decode()
    assert ("samples at most 62 of the 1000 tokens asked for: with the prompt's 2 tokens that fills the model's "
            "max_position_embeddings (64)") in generate(1000)
    assert "samples at most" not in generate(62)
    r = run_cli("generate", "--checkpoint", run, "--prompt-ids", "1 x", check=False)
    assert r.returncode == 2 and r.stderr.startswith("lmcore generate: --prompt-ids: expected token ids") and \
        "`lmcore generate --help` lists the options" in r.stderr, r.stderr
