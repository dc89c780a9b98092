# `lmcore launch --restart-failed K` and elastic training through the CLI: a rank killed with SIGKILL
# in the middle of a forward pass (a fault point armed on rank 1 only) is restarted by the launcher,
# the two survivors go on in the meantime, the restarted rank is admitted at the next checkpoint, and
# the run ends with three ranks; metrics.jsonl has one line per change and report.html marks both.
import json
import os
import subprocess
import textwrap

import numpy as np

from conftest import BUILD

LMCORE = BUILD / "lmcore"
PY = "/usr/bin/python3"


def launch(args, env=None, timeout=180):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([str(LMCORE), "launch", *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def test_restart_failed_starts_a_failed_rank_again(tmp_path):
    script = tmp_path / "r.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        r, again = int(os.environ["LMCORE_RANK"]), int(os.environ.get("LMCORE_RESTART_COUNT", "0"))
        print(f"rank {r} run {again}", flush=True)
        sys.exit(3 if r == 1 and again == 0 else 0)
    """))
    p = launch(["--nproc", "3", "--restart-failed", "1", "--", PY, str(script)])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "lmcore launch: rank 1 exited with status 3; starting it again (1 of 1)" in p.stderr, p.stderr
    assert "[rank 1] rank 1 run 1" in p.stdout, p.stdout
    assert "[rank 0] rank 0 run 0" in p.stdout and "[rank 2] rank 2 run 0" in p.stdout


def test_restart_failed_gives_up_after_k_restarts_and_stops_the_others(tmp_path):
    script = tmp_path / "r.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        if int(os.environ["LMCORE_RANK"]) == 1:
            sys.exit(5)
        time.sleep(60)
    """))
    p = launch(["--nproc", "2", "--restart-failed", "2", "--", PY, str(script)], timeout=60)
    assert p.returncode == 5, p.stdout + p.stderr
    assert "starting it again (1 of 2)" in p.stderr and "starting it again (2 of 2)" in p.stderr, p.stderr
    assert "rank 1 exited with status 5; stopping the other ranks" in p.stderr, p.stderr


def test_restart_failed_help_and_usage():
    p = subprocess.run([str(LMCORE), "launch", "--help"], capture_output=True, text=True)
    assert "--restart-failed" in p.stdout and "=0" in p.stdout, p.stdout
    p = subprocess.run([str(LMCORE), "launch", "--restart-failed", "-1", "--", "true"], capture_output=True, text=True)
    assert p.returncode == 2, p.stdout + p.stderr


def test_elastic_usage_errors_exit_2():
    for args, msg in ((["--elastic"], "--elastic needs --fsdp"),
                      (["--fsdp", "--min-ranks", "2"], "--min-ranks and --memory-checkpoint-every need --elastic"),
                      (["--fsdp", "--elastic", "--min-ranks", "0"],
                       "--min-ranks: expected a positive number, found 0")):
        p = subprocess.run([str(LMCORE), "train", *args], capture_output=True, text=True)
        assert p.returncode == 2 and msg in p.stderr, (args, p.returncode, p.stderr)


def write_data(d, vocab=48):
    def synth(n, seed):
        t, s = [], seed
        while len(t) < n:
            t.append(1)
            s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            length, start = 20 + (s >> 33) % 40, 2 + (s >> 45) % (vocab - 2)
            t.extend(2 + (start + 3 * i) % (vocab - 2) for i in range(length))
        return t[:n]

    for name, toks in (("data_train_000000.bin", synth(20000, 1)), ("data_val_000000.bin", synth(2000, 2))):
        header = np.zeros(256, dtype=np.int32)
        header[:3] = (20240520, 1, len(toks))
        with open(d / name, "wb") as f:
            f.write(header.tobytes())
            f.write(np.array(toks, dtype=np.uint16).tobytes())
    (d / "config.json").write_text(json.dumps({
        "vocab_size": vocab, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "tie_word_embeddings": False, "eos_token_id": 1, "bos_token_id": 1}))


def train_args(d, out, steps):
    return [str(LMCORE), "train", "--fsdp", "--elastic", "--config", str(d / "config.json"), "--data",
            str(d / "data_train_*.bin"), "--out", str(out), "--max-steps", str(steps), "--batch-size", "1",
            "--seq-len", "32", "--global-batch", "6", "--lr", "3e-3", "--warmup", "2", "--eval-every", "1000",
            "--checkpoint-every", "2", "--memory-checkpoint-every", "2", "--keep-checkpoints", "100",
            "--threads", "1"]


def membership(out):
    return [json.loads(l) for l in open(out / "metrics.jsonl") if '"membership"' in l]


def test_elastic_train_under_launch_loses_a_rank_and_takes_it_back(tmp_path):
    write_data(tmp_path)
    out = tmp_path / "run"
    p = launch(["--nproc", "3", "--keep-going", "--restart-failed", "1", "--", *train_args(tmp_path, out, 40)],
               env={"LMCORE_FAULT": "fsdp.forward:2@1", "LMCORE_FAULT_AFTER": "train.step:6"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "lmcore launch: rank 1 was killed by signal 9; starting it again (1 of 1)" in p.stderr, p.stderr[-3000:]
    ev = membership(out)
    assert [e["cause"] for e in ev] == ["failure", "join"], ev
    assert (ev[0]["old_world"], ev[0]["new_world"], ev[0]["lost_ranks"], ev[0]["step"]) == (3, 2, [1], 4), ev[0]
    assert (ev[1]["old_world"], ev[1]["new_world"], ev[1]["joined"]) == (2, 3, 1), ev[1]
    end = [json.loads(l) for l in open(out / "metrics.jsonl") if '"end"' in l]
    assert end[-1]["world_size"] == 3 and end[-1]["step"] == 40, end
    report = (out / "report.html").read_text()
    assert "3\u21922 ranks" in report and "2\u21923 ranks" in report
    assert "step 40: train loss" in p.stdout, p.stdout[-2000:]
