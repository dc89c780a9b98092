"""Issue 13's bad inputs through the Python module and the CLI: special files, destinations that must
not be replaced, interrupted writes, read-only and big-endian NumPy arrays, files rewritten under a
mapping, float -> integer casts, messages a person can act on, and usage errors (exit 2). Each test
names the defect it guards; each failed before its fix."""
import json
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import lmcore
from io_helpers import CLI, run_cli

PY = sys.executable
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def run_py(code, timeout=60):
    return subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=timeout, env=ENV)


# ---- defect 3: a FIFO blocked load() and `lmcore inspect` forever --------------------------------

def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "weights.safetensors"
    os.mkfifo(fifo)
    for mmap in (True, False):
        r = run_py(f"import lmcore; lmcore.load({str(fifo)!r}, mmap={mmap})", timeout=30)
        assert r.returncode != 0
        assert f"load: '{fifo}' is a FIFO, not a regular file" in r.stderr
    r = subprocess.run([str(CLI), "inspect", str(fifo)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "is a FIFO, not a regular file" in r.stderr
    r = run_py(f"import lmcore; lmcore.detect_format({str(fifo)!r})", timeout=30)
    assert "is a FIFO, not a regular file" in r.stderr


def test_fifo_is_refused_by_trace_and_the_tokenizer_readers(tmp_path):
    # `lmcore trace FIFO` waited forever; the tokenizer said "Operation not supported".
    fifo = tmp_path / "dump.json"
    os.mkfifo(fifo)
    for args, what in ((["trace", str(fifo)], "trace dump"),
                       (["tokenizer", "encode", "--tokenizer", str(fifo)], "tokenizer.json"),
                       (["tokenize", "--tokenizer", str(fifo), "--out-dir", str(tmp_path / "shards"), str(fifo)],
                        "tokenizer.json")):
        r = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=30, input="")
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        assert f"{what}: '{fifo}' is a FIFO, not a regular file" in r.stderr, (args, r.stderr)


# ---- defect 4: convert replaced a FIFO, a device or a symlink at OUT with a regular file ---------

def small_checkpoint(path):
    lmcore.save_safetensors(str(path), {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})


def test_convert_refuses_non_regular_destinations(tmp_path):
    src = tmp_path / "in.safetensors"
    small_checkpoint(src)
    fifo = tmp_path / "out.pt"
    os.mkfifo(fifo)
    target = tmp_path / "target.pt"
    target.write_bytes(b"keep me")
    link = tmp_path / "link.pt"
    link.symlink_to(target)
    folder = tmp_path / "dir.pt"
    folder.mkdir()
    cases = {fifo: "is a FIFO, not a regular file; refusing to replace it",
             link: f"is a symbolic link (to '{target}'); lmcore does not write through links",
             folder: "is a directory, not a regular file; refusing to replace it"}
    # A character device made here, not /dev/null: a regression must not be able to damage the system.
    dev = tmp_path / "null.pt"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        cases[dev] = "is a character device, not a regular file; refusing to replace it"
    except PermissionError:
        pass  # not root: the FIFO stands for devices (same check)
    for out, why in cases.items():
        r = run_cli("convert", src, out, check=False)
        assert r.returncode == 1 and why in r.stderr, (out, r.stderr)
        with pytest.raises(lmcore.Error, match="refusing|does not write through"):
            lmcore.convert(str(src), str(out))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.path.islink(link) and folder.is_dir()
    assert target.read_bytes() == b"keep me"
    if dev.exists():
        assert stat.S_ISCHR(os.lstat(dev).st_mode)
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]
    assert "symbolic link" in run_cli("convert", "--help").stdout  # the policy is in --help


def test_convert_in_the_library_and_python(tmp_path):
    src = tmp_path / "in.pt"
    torch.save({"a": torch.arange(10, dtype=torch.float32), "b": torch.ones(2, 2, dtype=torch.bfloat16)}, src)
    r = lmcore.convert(str(src), str(tmp_path / "out.safetensors"))
    assert r == {"from": "pytorch-zip", "to": "safetensors", "tensors": 2, "bytes": 48}
    r = lmcore.convert(str(tmp_path / "out.safetensors"), str(tmp_path / "back.weights"), to="torch")
    assert r["to"] == "pytorch-zip"
    back = torch.load(tmp_path / "back.weights", weights_only=True)
    assert torch.equal(back["a"], torch.arange(10, dtype=torch.float32))
    with pytest.raises(lmcore.Error, match="cannot tell the output format"):
        lmcore.convert(str(src), str(tmp_path / "out.weights"))
    with pytest.raises(lmcore.Error, match="to must be 'safetensors' or 'torch'"):
        lmcore.convert(str(src), str(tmp_path / "x.pt"), to="npz")


# ---- defect 5: a killed convert left OUT.tmp.XXXXXX files behind ---------------------------------

def big_checkpoint(path, mib):
    lmcore.save_safetensors(str(path), {f"t{i}": np.full((1 << 18,), i, dtype=np.float32) for i in range(mib)})


def default_signals():
    """In the child before exec: SIGTERM and SIGINT at their default action, as in a CLI started from a
    terminal. A shell that runs the tests in the background hands them SIGINT ignored, and lmcore keeps an
    ignored signal ignored, so the SIGINT case would never interrupt the convert."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_temporary(folder, proc, limit=60):
    end = time.time() + limit
    while time.time() < end and proc.poll() is None:
        if [p for p in os.listdir(folder) if ".tmp." in p]:
            return True
        time.sleep(0.002)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_convert_interrupted_removes_its_temporary(tmp_path, sig):
    src = tmp_path / "in.safetensors"
    big_checkpoint(src, 192)
    out = tmp_path / "out" / "model.pt"
    out.parent.mkdir()
    caught = False
    for attempt in range(10):  # the temporary must be caught while it exists; retry when the signal came late
        proc = subprocess.Popen([str(CLI), "convert", str(src), str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=default_signals)
        seen = wait_for_temporary(out.parent, proc)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        if out.exists():
            # The convert renamed its output into place before the signal landed (the process may still
            # have died of it, after the rename): the output must then be whole.
            assert len(torch.load(out, weights_only=True)) == 192
            out.unlink()
            continue
        if seen and proc.returncode == -sig:
            caught = True
            break
    assert caught, "never caught convert while its temporary existed"
    assert os.listdir(out.parent) == []  # no temporary, no half-written output


def test_temporary_of_a_killed_convert_is_swept_by_the_next(tmp_path):
    src = tmp_path / "in.safetensors"
    big_checkpoint(src, 192)
    out = tmp_path / "out" / "model.pt"
    out.parent.mkdir()
    for attempt in range(5):
        proc = subprocess.Popen([str(CLI), "convert", str(src), str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=default_signals)
        seen = wait_for_temporary(out.parent, proc)
        proc.kill()  # nothing runs on SIGKILL
        proc.wait(timeout=60)
        if seen and [p for p in os.listdir(out.parent) if ".tmp." in p]:
            break
    left = [p for p in os.listdir(out.parent) if ".tmp." in p]
    assert len(left) == 1 and left[0].startswith(f"model.pt.tmp.{proc.pid}."), left
    small_checkpoint(tmp_path / "small.safetensors")
    run_cli("convert", tmp_path / "small.safetensors", out)
    assert os.listdir(out.parent) == ["model.pt"]


# ---- defect 6: from_numpy wrote through read-only arrays and read big-endian ones as little -------

def test_from_numpy_respects_read_only_arrays(tmp_path):
    data = bytes(np.arange(4, dtype=np.float32).tobytes())
    t = lmcore.from_numpy(np.frombuffer(data, dtype=np.float32))
    assert t.read_only
    with pytest.raises(lmcore.Error, match="fill_: the tensor .* is read-only"):
        t.fill_(7.0)
    with pytest.raises(lmcore.Error, match="copy_: the tensor .* is read-only"):
        t.copy_(np.zeros(4, dtype=np.float32))
    with pytest.raises(lmcore.Error, match="copy_cast: the tensor .* is read-only"):
        lmcore.copy_cast(lmcore.zeros([4]), t)
    assert data == np.arange(4, dtype=np.float32).tobytes()  # the bytes object is unchanged
    assert not t.numpy().flags.writeable  # and stays read-only on the way back to NumPy
    with pytest.raises(lmcore.Error, match=r"to_dlpack: the tensor .* is read-only .* t.clone\(\)"):
        torch.utils.dlpack.from_dlpack(t)  # DLPack cannot say read-only: torch would write through it
    assert torch.equal(torch.utils.dlpack.from_dlpack(t.clone()), torch.arange(4, dtype=torch.float32))
    assert float(lmcore.sum(t).numpy()) == 6.0  # reading is fine
    c = t.clone()
    assert not c.read_only
    c.fill_(1.0)

    path = tmp_path / "a.bin"
    np.arange(8, dtype=np.float32).tofile(path)
    mm = np.memmap(path, dtype=np.float32, mode="r")
    tm = lmcore.from_numpy(mm)
    with pytest.raises(lmcore.Error, match="read-only"):  # used to segfault (a PROT_READ mapping)
        tm.fill_(1.0)
    with pytest.raises(lmcore.Error, match="read-only"):
        lmcore.scatter_add_(tm, 0, lmcore.zeros([1], "i64"), lmcore.full([1], 1.0))
    assert np.array_equal(np.fromfile(path, dtype=np.float32), np.arange(8, dtype=np.float32))
    w = np.zeros(3, dtype=np.float32)
    tw = lmcore.from_numpy(w)
    assert not tw.read_only
    tw.fill_(2.0)
    assert np.array_equal(w, [2, 2, 2])


def test_from_numpy_refuses_big_endian():
    a = np.arange(3, dtype=">f4")
    with pytest.raises(lmcore.Error, match=r"big-endian \(dtype '>f4'\).*astype"):
        lmcore.from_numpy(a)
    t = lmcore.from_numpy(a.astype("<f4"))
    assert np.array_equal(t.numpy(), [0, 1, 2])
    assert lmcore.from_numpy(np.arange(3, dtype=">u1")).numpy().tolist() == [0, 1, 2]  # one byte: no order


# ---- defect 7: a mapped file rewritten in place killed the process with a bare SIGBUS -------------

def test_sigbus_on_a_truncated_mapping_names_the_file_and_the_fix(tmp_path):
    path = tmp_path / "m.safetensors"
    lmcore.save_safetensors(str(path), {"w": np.ones(1 << 20, dtype=np.float32)})
    code = f"""
import os, lmcore
t = lmcore.load({str(path)!r})["w"]
os.truncate({str(path)!r}, 0)
print(float(t.numpy().sum()))
"""
    r = run_py(code)
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stderr)
    assert f"of the memory mapping of '{path}'" in r.stderr
    assert "lmcore.load(path, mmap=False)" in r.stderr
    # Without the mapping, the same program reads its copy and never faults.
    lmcore.save_safetensors(str(path), {"w": np.ones(1 << 20, dtype=np.float32)})
    r = run_py(code.replace(")[\"w\"]", ", mmap=False)[\"w\"]"))
    assert r.returncode == 0 and float(r.stdout) == float(1 << 20), r.stderr
    assert "mmap=False" in lmcore.load.__doc__


# ---- defect 8: float -> integer casts of NaN, Inf and out-of-range values silently gave 0 ---------

SPECIALS = [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 300.7, -300.7, 2.5, -2.5, 1e20, 255.9, 256.0,
            -1.0, -129.0, 2147483647.0, -2147483648.0, 9.3e18, -9.3e18]
INT_DTYPES = {torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
              torch.bool: "bool"}


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_float_to_integer_casts_match_torch_on_every_special(src):
    x = torch.tensor(SPECIALS, dtype=torch.float64).to(src)
    lm = lmcore.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    for dst, name in INT_DTYPES.items():
        want = x.to(dst)
        got = torch.utils.dlpack.from_dlpack(lm.to(name)) if dst != torch.bool else \
            torch.from_numpy(lm.to(name).numpy().copy())
        assert got.tolist() == want.tolist(), (src, dst, got.tolist(), want.tolist())


def test_full_and_fill_refuse_values_an_integer_dtype_cannot_hold():
    for value, dtype in [(float("nan"), "i32"), (float("inf"), "i64"), (3e9, "i32"), (128.0, "i8"), (-1.0, "u8"),
                         (255.5, "u8"), (9.3e18, "i64")]:
        with pytest.raises(lmcore.Error, match=f"full: value .* cannot be converted to {dtype} without overflow"):
            lmcore.full([2], value, dtype)
        with pytest.raises(lmcore.Error, match=f"fill_: value .* cannot be converted to {dtype} without overflow"):
            lmcore.zeros([2], dtype).fill_(value)
        with pytest.raises(RuntimeError):  # torch refuses the same values
            torch.full([2], value, dtype=getattr(torch, {"i32": "int32", "i64": "int64", "i8": "int8",
                                                          "u8": "uint8"}[dtype]))
    assert lmcore.full([2], 2.7, "i32").numpy().tolist() == [2, 2]  # in range: truncated, as torch
    assert lmcore.full([2], -128.0, "i8").numpy().tolist() == [-128, -128]
    assert lmcore.full([1], float("nan"), "bool").numpy().tolist() == [True]


# ---- defect 15: messages a person could not act on -----------------------------------------------

def test_messages_name_the_argument_and_what_was_found(tmp_path):
    t = lmcore.zeros([2, 3])
    with pytest.raises(lmcore.Error, match=r"sum: argument 'dim' must be None, an int or a sequence of ints, found "
                                           r"float \(0.5\)"):
        lmcore.sum(t, dim=0.5)
    with pytest.raises(lmcore.Error, match=r"found float \(1.5\)"):
        lmcore.sum(t, dim=[0, 1.5])
    with pytest.raises(lmcore.Error, match=r"save_safetensors: tensor names must be str, found int \(1\)"):
        lmcore.save_safetensors(str(tmp_path / "x.safetensors"), {1: t})
    with pytest.raises(lmcore.Error, match=r"metadata must map str to str, found str -> int"):
        lmcore.save_safetensors(str(tmp_path / "x.safetensors"), {"t": t}, {"step": 3})
    with pytest.raises(lmcore.Error, match=r"create_block_mask: batch 1048576 x heads 1048576 .* needs about .* GiB "
                                           r"for its block lists, more than this machine's"):
        lmcore.create_block_mask(lambda b, h, q, k: q >= k, 1 << 20, 1 << 20, 128, 128)


def test_negative_legacy_storage_size_is_named_as_damage(tmp_path):
    path = tmp_path / "legacy.pt"
    x = torch.tensor([1.5, 2.5, 3.5], dtype=torch.float32)
    torch.save({"x": x}, path, _use_new_zipfile_serialization=False)
    data = bytearray(path.read_bytes())
    at = data.rfind(x.numpy().tobytes()) - 8
    assert int.from_bytes(data[at:at + 8], "little") == 3
    data[at:at + 8] = (-5).to_bytes(8, "little", signed=True)
    path.write_bytes(bytes(data))
    with pytest.raises(lmcore.Error, match=r"legacy storage '\d+' at byte \d+ has the element count -5, expected a "
                                           r"count >= 0 \(the file is damaged\)"):
        lmcore.load(str(path))


# ---- defect 14: usage errors exit 2; bench checks every argument first and lists a suite's own ----

@pytest.mark.parametrize("args", [["inspect"], ["inspect", "a", "b", "c"], ["convert", "a"],
                                  ["convert", "a", "b.pt", "--to", "npz"], ["info", "--bogus"], ["trace", "--bogus"],
                                  ["upgrade-check", "--bogus"], ["train", "--bogus"], ["generate", "--bogus"],
                                  ["launch", "--bogus"], ["bench", "--quik"], ["bench", "lce", "--bogus=1"],
                                  ["bench", "nosuch"], ["bench", "core", "--ranks=2"], ["bench", "--json", "-x"],
                                  ["bench", "codegen", "rmsnorm", "nosuch"], ["bench", "upgrade", "a", "b"],
                                  ["bench", "attention", "bf16", "nosuch"],
                                  ["codegen", "warm", "--batch-size", "10000000000", "--seq-len", "10000000000"],
                                  ["codegen", "warm", "--batch-size", "1000000000", "--seq-len", "1000000000"]])
def test_usage_errors_exit_2(args):
    start = time.time()
    r = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert r.stderr.strip() and not r.stdout.strip(), (args, r.stdout)  # nothing ran
    assert time.time() - start < 30


# A suite's values are checked before it measures anything. Before: "fsdp --ranks=0" and "train
# --models=nope" printed an empty table and exited 0, "fsdp --steps=2" and "--batch=-1" ran with 3 and 1,
# "lce --n=0" ended in a JSON type error and "--dtype=f7" in exit 1, and "fsdp --rate=..." went unchecked
# into the shaped link script's shell command line.
@pytest.mark.parametrize("args, message", [
    (["fsdp", "--ranks=0"], "lmcore bench fsdp: --ranks=0: expected integers in [2, 64] separated by commas"),
    (["fsdp", "--ranks=2,x"], "--ranks=2,x: expected integers in [2, 64]"),
    (["fsdp", "--net=wifi"], "--net=wifi: expected one or more of loopback, shaped"),
    (["fsdp", "--rate=1gbit;true"], "--rate=1gbit;true: expected a tc rate such as 1gbit"),
    (["fsdp", "--rate=0mbit"], "--rate=0mbit: expected a tc rate such as 1gbit"),
    (["fsdp", "--steps=2"], "--steps=2: expected an integer in [3, 100000], found '2'"),
    (["fsdp", "--batch=-1"], "--batch=-1: expected an integer in [1, 4096]"),
    (["lce", "--n=0"], "lmcore bench lce: --n=0: expected an integer in [1, 2147483648], found '0'"),
    (["lce", "--v=99999999999999999999"], "--v=99999999999999999999: expected an integer"),
    (["lce", "--dtype=f7"], "--dtype=f7: expected one or more of f32, bf16"),
    (["lce", "--repeats=1x"], "--repeats=1x: expected an integer in [1, 10000], found '1x'"),
    (["train", "--models=nope"], "lmcore bench train: --models=nope: expected one or more of default, gpt2"),
    (["train", "--steps=0"], "--steps=0: expected an integer in [1, 100000]"),
    (["train", "--keep-gate-up=maybe"], "--keep-gate-up=maybe: expected one of auto, on, off"),
    (["elastic", "--checkpoints=tape"], "--checkpoints=tape: expected one or more of memory, disk"),
    (["tokenizer", "--vocab=10"], "--vocab=10: expected an integer in [257, 16777216]"),
    (["comm", "--ranks=1"], "--ranks=1: expected integers in [2, 64]"),
    (["comm", "--sizes=5G"], "size '5G' is not a number of bytes in [1, 1T]"),
    (["upgrade", "/nonexistent/tree"], "bench upgrade: TREE '/nonexistent/tree' is not a directory (it does not exist)"),
    (["upgrade", "/etc/hostname"], "bench upgrade: TREE '/etc/hostname' is not a directory")])
def test_bench_suite_values_are_usage_errors(args, message):
    r = subprocess.run([str(CLI), "bench", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, (args, r.returncode, r.stderr)
    assert f"(lmcore bench {args[0]} --help)" in r.stderr and not r.stdout.strip(), (args, r.stdout)


# Out-of-range option values are usage errors that name the option. Before: "train --lr nan" and
# "--seq-len 0" exited 1 with the optimizer's or the trainer's words ("AdamW: eps must be > 0 and
# weight_decay >= 0, found 1e-08 and -1" for --weight-decay -1), "generate --top-k -3" sampled from the
# whole vocabulary, "--prompt-ids 4294967297" wrapped to token 1, --prompt beside --prompt-ids was
# dropped without a word, and tokenize, tokenizer train and upgrade-check ran with "--threads -2".
@pytest.mark.parametrize("args,named", [
    (["train", "--lr", "nan"], "--lr"), (["train", "--lr", "inf"], "--lr"), (["train", "--lr", "-1"], "--lr"),
    (["train", "--lr", "1e400"], "--lr"), (["train", "--seq-len", "0"], "--seq-len"),
    (["train", "--batch-size", "0"], "--batch-size"), (["train", "--grad-accum", "0"], "--grad-accum"),
    (["train", "--max-steps", "-1"], "--max-steps"), (["train", "--time-budget", "nan"], "--time-budget"),
    (["train", "--min-lr-ratio", "1.5"], "--min-lr-ratio"), (["train", "--warmup", "-2"], "--warmup"),
    (["train", "--weight-decay", "-1"], "--weight-decay"), (["train", "--beta1", "1"], "--beta1"),
    (["train", "--beta2", "nan"], "--beta2"), (["train", "--grad-clip", "-0.5"], "--grad-clip"),
    (["train", "--dtype", "f64"], "--dtype"), (["train", "--schedule", "linear"], "--schedule"),
    (["train", "--keep-checkpoints", "0"], "--keep-checkpoints"), (["train", "--eval-batches", "0"], "--eval-batches"),
    (["train", "--eval-every", "-1"], "--eval-every"), (["train", "--checkpoint-every", "-1"], "--checkpoint-every"),
    (["train", "--threads", "-1"], "--threads"), (["train", "--global-batch", "-4"], "--global-batch"),
    (["train", "--fsdp", "--prefetch", "-1"], "--prefetch"),
    (["train", "--fsdp", "--reduce-dtype", "f16"], "--reduce-dtype"),
    (["train", "--fsdp", "--param-dtype", "i8"], "--param-dtype"),
    (["train", "--fsdp", "--elastic", "--min-ranks", "0"], "--min-ranks"),
    (["generate", "--checkpoint", "/nonexistent", "--temperature", "nan"], "--temperature"),
    (["generate", "--checkpoint", "/nonexistent", "--temperature", "-1"], "--temperature"),
    (["generate", "--checkpoint", "/nonexistent", "--top-k", "-3"], "--top-k"),
    (["generate", "--checkpoint", "/nonexistent", "--prompt-ids", "4294967297"], "--prompt-ids"),
    (["generate", "--checkpoint", "/nonexistent", "--prompt-ids", "-1 2"], "--prompt-ids"),
    (["generate", "--checkpoint", "/nonexistent", "--prompt-ids", "1 x"], "--prompt-ids"),
    (["generate", "--checkpoint", "/nonexistent", "--prompt", "a", "--prompt-ids", "1"], "--prompt"),
    (["tokenize", "a.txt", "--tokenizer", "t.json", "--out-dir", "o", "--threads", "-2"], "--threads"),
    (["tokenize", "a.txt", "--tokenizer", "t.json", "--out-dir", "o", "--val-fraction", "nan"], "--val-fraction"),
    (["tokenize", "a.txt", "--tokenizer", "t.json", "--out-dir", "o", "--shard-tokens", "0"], "--shard-tokens"),
    (["tokenizer", "train", "a.txt", "--out", "t.json", "--vocab-size", "99999999999"], "--vocab-size"),
    (["tokenizer", "train", "a.txt", "--out", "t.json", "--vocab-size", "300", "--min-frequency", "-1"],
     "--min-frequency"),
    (["tokenizer", "train", "a.txt", "--out", "t.json", "--vocab-size", "300", "--threads", "-1"], "--threads"),
    (["upgrade-check", "--threads", "-3", "a.py"], "--threads"),
    (["upgrade-check", "--threads", "5000", "a.py"], "--threads: expected a thread count in [0, 4096]"),
    (["train", "--threads", "100000"], "--threads: expected a thread count in [0, 4096]"),
])
def test_option_values_out_of_range_are_usage_errors_naming_the_option(args, named):
    r = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert named in r.stderr, (args, r.stderr)
    assert not r.stdout.strip(), (args, r.stdout)  # nothing ran


@pytest.mark.parametrize("args, message", [
    (["train", "--out-dir", "x"], "lmcore train: unknown option '--out-dir' (did you mean --out?); unexpected "
                                  "argument 'x'; `lmcore train --help` lists the options"),
    (["inspect", "a", "--jsn"], "lmcore inspect: unknown option '--jsn' (did you mean --json?);"),
    (["inspect", "a", "b", "c"], "lmcore inspect: unexpected argument 'b'; unexpected argument 'c';"),
    (["launch", "--nprc", "2", "--", "true"], "unknown option '--nprc' (did you mean --nproc?)"),
    (["codegen", "list", "--al"], "lmcore codegen list: unknown option '--al'; `lmcore codegen list --help`"),
    (["train", "--zzzzzzzz"], "lmcore train: unknown option '--zzzzzzzz'; `lmcore train --help`"),
    (["inspect", "a", "---"], "lmcore inspect: unknown option '---'; `lmcore inspect --help`"),
    (["inspect", "a", "--", "--x"], "lmcore inspect: unexpected argument '--x';")])
def test_unknown_arguments_are_named_in_order_with_the_option_meant(args, message):
    r = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
    assert "did you mean" not in message or r.stderr.count("did you mean") == 1


@pytest.mark.parametrize("args, message", [
    (["train", "--lr", "nan"], "lmcore train: --lr: expected a positive number, found nan; `lmcore train --help`"),
    (["generate"], "lmcore generate: --checkpoint is required; `lmcore generate --help` lists the options"),
    (["tokenizer", "train"], "lmcore tokenizer train: --vocab-size is required; `lmcore tokenizer train --help`"),
    (["codegen"], "lmcore codegen: A subcommand is required;"),
    # A failed check and an unknown option on one line: both named, so that one run shows both.
    (["train", "--out-dir", "x", "--lr", "nan"], "lmcore train: --lr: expected a positive number, found nan; unknown "
     "option '--out-dir' (did you mean --out?); unexpected argument 'x'; `lmcore train --help` lists the options"),
    (["tokenizer", "train", "--vocab-sise", "5"], "lmcore tokenizer train: --vocab-size is required; unknown option "
     "'--vocab-sise' (did you mean --vocab-size?); `lmcore tokenizer train --help`"),
    (["codegen", "warm", "--batch-size", "-1", "--bogus"], "lmcore codegen warm: --batch-size: expected a positive "
     "number, found -1; unknown option '--bogus'; `lmcore codegen warm --help`")])
def test_every_usage_error_names_its_command(args, message):
    r = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, (args, r.stderr)


def test_bench_suite_help_lists_its_arguments():
    r = run_cli("bench", "lce", "--help")
    for form in ["--n=N", "--h=H", "--v=V", "--dtype=DTYPE", "--budget-mib=MIB", "--repeats=N"]:
        assert form in r.stdout
    assert "--lce-child" not in r.stdout  # internal
    assert "--ranks=N[,N...]" in run_cli("bench", "comm", "--help").stdout
    assert "takes no arguments" in run_cli("bench", "core", "--help").stdout
    assert all(k in run_cli("bench", "codegen", "--help").stdout for k in ["rmsnorm", "gemm", "compile", "train"])
    assert all(k in run_cli("bench", "attention", "--help").stdout for k in ["flex", "bf16", "mask"])
    top = run_cli("bench", "--help").stdout
    assert "SUITE --help" in top and "attention" in top


def test_bench_section_keywords_run_only_those_sections():
    tables = json.loads(run_cli("bench", "--json", "attention", "mask").stdout)
    assert [t["title"] for t in tables] == ["attention: create_block_mask, causal, L = S = 1,048,576, block 128"]
    assert tables[0]["rows"][0]["blocks"] == 33558528  # the causal blocks of 8192 x 8192 block rows, diagonal included


# ---- defect 14: upgrade-check skipped a file named on the command line without saying so ----------

def test_upgrade_check_checks_a_named_file_whatever_its_name(tmp_path):
    script = tmp_path / "launch_job"  # an executable script without .py
    script.write_text("#!/usr/bin/env python3\nimport torch.distributed as dist\n"
                      "dist.all_gather_into_tensor(out, inp)\n")
    r = run_cli("upgrade-check", "--no-cuda-env", "--format", "json", script, check=False)
    assert r.returncode == 1, r.stderr
    found = json.loads(r.stdout)
    assert [f["code"] for f in found] == ["UPG101"], found
    # In a folder walk, only Python files, notebooks and pin files are read; named, any file is.
    (tmp_path / "notes.txt").write_text("import torch.distributed as dist\ndist.all_gather_into_tensor(out, inp)\n")
    (tmp_path / "launch_job").unlink()
    assert run_cli("upgrade-check", "--no-cuda-env", tmp_path, check=False).returncode == 0
    assert run_cli("upgrade-check", "--no-cuda-env", tmp_path / "notes.txt", check=False).returncode == 1


# Runs argv[1:] from a fresh, small interpreter and prints its exit status and peak RSS. A child forked
# from this test process would report this process's peak instead (exec keeps the old high-water mark).
_PEAK_RSS_PROBE = """
import os, sys
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""


def _peak_rss_bytes(*args):
    r = subprocess.run([sys.executable, "-c", _PEAK_RSS_PROBE, str(CLI), *map(str, args)],
                       capture_output=True, text=True, check=True)
    rc, peak = map(int, r.stdout.split())
    return rc, peak


@pytest.mark.parametrize("item,tokens,brackets", [("0, ", 2, 0), ("a+b*c-1, ", 8, 0), ("f(x)[0], ", 8, 4)])
def test_upgrade_check_memory_is_a_small_multiple_of_a_single_line_file(tmp_path, item, tokens, brackets):
    # One 24 MB logical line of tiny tokens: the tokenizer's lists are the only thing that grows with
    # it. It used to take 19-25x the file (16-byte tokens, a per-token bracket table, a vector that
    # doubled); now the file + 8 bytes a token + 8 bytes a bracket, reserved once: 6-12x here.
    small = tmp_path / "small.py"
    small.write_text("x = [0]\n")
    big = tmp_path / "big.py"
    n = 24_000_000 // len(item)
    big.write_text("x = [" + item * n + "]\n")
    size = big.stat().st_size
    rc_small, base = _peak_rss_bytes("upgrade-check", "--no-cuda-env", "--no-prefilter", small)
    rc_big, peak = _peak_rss_bytes("upgrade-check", "--no-cuda-env", "--no-prefilter", big)
    assert (rc_small, rc_big) == (0, 0)
    model = size + 8 * tokens * n + 8 * brackets * n
    print(f"{item!r}: {(peak - base) / size:.2f}x the file, {(peak - base) / model:.3f}x the model")
    assert peak - base <= 1.1 * model, f"{item!r}: {peak - base} bytes above the baseline, model {model}"
