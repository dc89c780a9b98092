# lmcore.torch.load / save and the conversion rules of issue 17: every format lmcore.load reads comes
# back as torch tensors equal to torch's own reading, mapped tensors are copy-on-write (an in-place op
# never reaches the file, even a read-only one), bool crosses both ways, tensors that require grad are
# saved detached, big-endian data is converted, dtypes torch 1.13 lacks are refused by name.
import os
import stat

import numpy as np
import pytest
import torch

import lmcore
import lmcore.torch as lt


def state():
    g = torch.Generator().manual_seed(0)
    return {
        "wte": torch.randn(7, 4, generator=g, requires_grad=True),
        "mask": torch.tensor([[True, False, True], [False, False, True]]),
        "half": torch.randn(5, generator=g).half(),
        "bf": torch.randn(3, 2, generator=g).bfloat16(),
        "ids": torch.arange(6).view(2, 3).t(),  # non-contiguous
        "f64": torch.randn(2, generator=g, dtype=torch.float64),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
        "i8": torch.tensor([-3, 4], dtype=torch.int8),
    }


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("fmt", ["safetensors", "torch"])
@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(tmp_path, fmt, mmap):
    sd = state()
    path = tmp_path / f"ckpt.{fmt}"
    lt.save(sd, path, format=fmt)
    back = lt.load(path, mmap=mmap)
    assert set(back) == set(sd)
    for k, v in sd.items():
        assert same(back[k], v.detach()), k
        assert not back[k].requires_grad
    if fmt == "torch":
        ref = torch.load(path, weights_only=True)
        for k, v in sd.items():
            assert same(ref[k], v.detach()), k


def test_reads_what_torch_and_numpy_write(tmp_path):
    sd = {k: v.detach() for k, v in state().items()}
    torch.save(sd, tmp_path / "zip.pt")
    torch.save(sd, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    for name in ("zip.pt", "legacy.pt"):
        back = lt.load(tmp_path / name)
        for k, v in sd.items():
            assert same(back[k], v), f"{name}: {k}"
    np.save(tmp_path / "be.npy", np.arange(6, dtype=">f4").reshape(2, 3))  # big-endian: converted
    assert same(lt.load(tmp_path / "be.npy")["array"], torch.arange(6.0).view(2, 3))
    np.savez(tmp_path / "a.npz", flags=np.array([True, False]), x=np.arange(3, dtype=np.int32))
    back = lt.load(tmp_path / "a.npz")
    assert same(back["flags"], torch.tensor([True, False])) and same(back["x"], torch.arange(3, dtype=torch.int32))


def test_mapped_tensors_are_copy_on_write_even_for_a_read_only_file(tmp_path):
    path = tmp_path / "ro.safetensors"
    lt.save({"w": torch.ones(1024)}, path)
    before = path.read_bytes()
    os.chmod(path, stat.S_IRUSR | stat.S_IRGRP)
    try:
        w = lt.load(path, mmap=True)["w"]
        w.mul_(3.0)  # the tensor changes, the file does not
        assert torch.equal(w, torch.full((1024,), 3.0))
        assert path.read_bytes() == before
        assert torch.equal(lt.load(path)["w"], torch.ones(1024))
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)


def test_dtypes_torch_lacks_are_refused_by_name(tmp_path):
    np.savez(tmp_path / "u.npz", ok=np.arange(2, dtype=np.uint8), counts=np.arange(3, dtype=np.uint16))
    with pytest.raises(TypeError, match=r"u.npz: tensor 'counts' is u16, which torch 1.13 has no dtype for"):
        lt.load(tmp_path / "u.npz")


def test_save_takes_the_format_from_the_extension(tmp_path):
    """A "model.pt" used to get safetensors unless format="torch" was passed, and torch.load then
    failed with "invalid load key"; the extension rule is the one `lmcore convert` follows."""
    sd = {"w": torch.arange(6.0).view(2, 3), "b": torch.tensor([True, False])}
    for name, fmt in [("m.pt", "pytorch-zip"), ("m.pth", "pytorch-zip"), ("m.bin", "pytorch-zip"),
                      ("m.ckpt", "pytorch-zip"), ("m.safetensors", "safetensors")]:
        lt.save(sd, tmp_path / name)
        assert lmcore.detect_format(str(tmp_path / name)) == fmt, name
        back = torch.load(tmp_path / name) if fmt == "pytorch-zip" else lt.load(tmp_path / name)
        assert torch.equal(back["w"], sd["w"]) and torch.equal(back["b"], sd["b"]), name
    lt.save(sd, tmp_path / "named.pt", format="safetensors")  # an explicit format wins over the name
    assert lmcore.detect_format(str(tmp_path / "named.pt")) == "safetensors"
    with pytest.raises(ValueError, match=r"weights: cannot tell the format from the extension .*format='torch'"):
        lt.save(sd, tmp_path / "weights")
    with pytest.raises(ValueError, match="metadata: only the safetensors format stores metadata"):
        lt.save(sd, tmp_path / "meta.pt", metadata={"a": "b"})
    assert not (tmp_path / "weights").exists() and not (tmp_path / "meta.pt").exists()


def test_save_errors_name_the_key(tmp_path):
    with pytest.raises(TypeError, match=r"state_dict\['step'\]: expected a torch.Tensor, found int"):
        lt.save({"w": torch.ones(2), "step": 3}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match=r"state_dict: keys must be str, found int \(0\)"):
        lt.save({0: torch.ones(2)}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match=r"format: expected 'safetensors' or 'torch', found 'pickle'"):
        lt.save({"w": torch.ones(2)}, tmp_path / "x.pt", format="pickle")
    with pytest.raises(ValueError, match="metadata: only the safetensors format stores metadata"):
        lt.save({"w": torch.ones(2)}, tmp_path / "x.pt", format="torch", metadata={"a": "b"})
    assert not list(tmp_path.iterdir())  # nothing half-written
    with pytest.raises(lmcore.Error, match="missing.safetensors"):
        lt.load(tmp_path / "missing.safetensors")


def test_bool_and_requires_grad_cross_into_kernels():
    # bool: torch 1.13's DLPack has none; lmcore.torch carries it as bytes both ways.
    m = torch.tensor([[True, False], [False, True]])
    t = lt.to_lmcore(m.t(), "m")
    assert t.dtype == "bool" and t.strides == (1, 2)
    back = lt.from_lmcore(t)
    assert back.dtype == torch.bool and torch.equal(back, m.t())
    x = torch.randn(3, requires_grad=True)
    assert lt.to_lmcore(x, "x").numpy().tolist() == x.detach().tolist()
    with pytest.raises(TypeError, match="x: expected a torch.Tensor, found ndarray"):
        lt.to_lmcore(np.ones(2), "x")


def test_paths_are_any_bytes_the_file_system_allows(tmp_path):
    """A Linux file name need not be UTF-8; Python hands it over as a str with surrogate escapes
    (os.listdir), as bytes or as a Path. Each used to fail in pybind11's str conversion ("incompatible
    function arguments"), and an error quoting such a name would have become a UnicodeDecodeError."""
    name = os.fsdecode(b"w\xff.safetensors")  # 'w\udcff.safetensors'
    path = tmp_path / name
    lt.save({"w": torch.arange(4.0)}, path)
    assert os.fsencode(name) in os.listdir(os.fsencode(tmp_path))
    for p in (str(path), os.fsencode(path), path):
        assert torch.equal(lt.load(p)["w"], torch.arange(4.0))
        assert lmcore.detect_format(p) == "safetensors"
    lmcore.convert(str(path), str(tmp_path / os.fsdecode(b"w\xfe.pt")))
    assert torch.equal(torch.load(tmp_path / os.fsdecode(b"w\xfe.pt"))["w"], torch.arange(4.0))
    bad = tmp_path / os.fsdecode(b"bad\xfe.safetensors")
    bad.write_bytes(b"x")
    with pytest.raises(lmcore.Error, match=r"bad\\xfe\.safetensors: unknown checkpoint format"):
        lt.load(bad)
    tok = lmcore.Tokenizer.train(texts=["a b c a b"], vocab_size=260)
    tok.save(tmp_path / os.fsdecode(b"t\xff.json"))
    assert lmcore.Tokenizer.from_file(tmp_path / os.fsdecode(b"t\xff.json")).vocab_size == tok.vocab_size
