"""NumPy .npy/.npz through lmcore.load, and the `lmcore inspect` / `lmcore convert` commands (round
trips between PyTorch and safetensors files, verified by torch 1.13 and by an independent reader)."""
import json

import numpy as np
import pytest
import torch

import lmcore
from io_helpers import ALL_TORCH_DTYPES, assert_same, lm_bytes, random_tensor, run_cli, st_read, torch_bytes


def test_npy_orders_and_byte_orders(tmp_path):
    rng = np.random.default_rng(1)
    cases = {
        "c": rng.standard_normal((3, 4)).astype("<f4"),
        "fortran": np.asfortranarray(rng.standard_normal((3, 5))),
        "big": rng.standard_normal((6,)).astype(">f8"),
        "bool": rng.integers(0, 2, (2, 3)).astype(bool),
        "half": rng.standard_normal((2, 2)).astype(np.float16),
        "u16": rng.integers(0, 60000, (4,)).astype(np.uint16),
    }
    for name, a in cases.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, a)
        t, info = lmcore.load(str(path), with_info=True)
        assert info["format"] == "npy"
        got = t["array"].numpy()
        assert got.shape == a.shape and np.array_equal(got, a.astype(a.dtype.newbyteorder("="))), name


def test_npz_stored_and_compressed(tmp_path):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.linspace(0, 1, 7, dtype=np.float32)
    for fn, name in [(np.savez, "s.npz"), (np.savez_compressed, "c.npz")]:
        fn(tmp_path / name, a=a, b=b)
        t, info = lmcore.load(str(tmp_path / name), with_info=True)
        assert info["format"] == "npz"
        assert np.array_equal(t["a"].numpy(), a) and np.array_equal(t["b"].numpy(), b)


def test_npy_object_arrays_are_refused(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(lmcore.Error, match="pickled"):
        lmcore.load(str(tmp_path / "o.npy"))


def test_inspect_json(tmp_path):
    sd = {"w": random_tensor((4, 8), torch.float32, 1), "b": random_tensor((8,), torch.bfloat16, 2)}
    torch.save(sd, tmp_path / "m.pt")
    out = json.loads(run_cli("inspect", tmp_path / "m.pt", "--json").stdout)
    assert out["format"] == "pytorch-zip"
    assert [t["name"] for t in out["tensors"]] == ["w", "b"]
    assert out["tensors"][0]["shape"] == [4, 8] and out["tensors"][0]["bytes"] == 128
    assert out["total_bytes"] == 128 + 16
    data = (tmp_path / "m.pt").read_bytes()
    off = out["tensors"][0]["offset"]
    assert data[off:off + 128] == torch_bytes(sd["w"])  # the offset points at the tensor's bytes
    text = run_cli("inspect", tmp_path / "m.pt").stdout
    assert "pytorch-zip" in text and "bf16" in text


def test_inspect_unknown_file_fails_with_bytes(tmp_path):
    (tmp_path / "junk").write_bytes(b"\x00\x01\x02junk")
    r = run_cli("inspect", tmp_path / "junk", check=False)
    assert r.returncode == 1 and "00 01 02" in r.stderr


def test_convert_round_trips(tmp_path):
    base = random_tensor((6, 4), torch.float32, 3)
    sd = {f"t{i}": random_tensor((3, 2), dt, i) for i, dt in enumerate(ALL_TORCH_DTYPES)}
    sd.update({"base": base, "t": base.t(), "nested": {"x": base[1]}})
    torch.save(sd, tmp_path / "a.pt")
    r = run_cli("convert", tmp_path / "a.pt", tmp_path / "b.safetensors")
    assert "verified" in r.stdout
    header, arrays, _ = st_read(tmp_path / "b.safetensors")
    assert arrays["nested.x"].tobytes() == torch_bytes(base[1])
    run_cli("convert", tmp_path / "b.safetensors", tmp_path / "c.pt")
    back = torch.load(tmp_path / "c.pt", weights_only=True)
    for k, x in sd.items():
        if isinstance(x, dict):
            continue
        assert torch_bytes(back[k]) == torch_bytes(x), k
    # legacy -> safetensors with --to, output name without a known extension
    torch.save(sd["base"], tmp_path / "legacy.bin", _use_new_zipfile_serialization=False)
    run_cli("convert", tmp_path / "legacy.bin", tmp_path / "out.weights", "--to", "safetensors")
    assert lmcore.detect_format(str(tmp_path / "out.weights")) == "safetensors"
    r = run_cli("convert", tmp_path / "a.pt", tmp_path / "x.unknown", check=False)
    assert r.returncode == 2
