"""lmcore.load on files written by torch 1.13 (every dtype, views, shared storages, nested dicts, real
modules, legacy format, ZIP64, big-endian, deflated), torch.load(weights_only=True) on lmcore's .pt
files, and hostile pickles. Every tensor is compared bit for bit."""
import collections
import io
import os
import pickle
import struct
import zipfile

import pytest
import torch

import lmcore
from io_helpers import (ALL_TORCH_DTYPES, assert_same, lm_address, lm_bytes, random_tensor, torch_bytes)


def save(tmp_path, obj, name="m.pt", **kw):
    path = tmp_path / name
    torch.save(obj, path, **kw)
    return path


def test_every_dtype_bit_exact(tmp_path):
    sd = {f"t{i}": random_tensor((5, 7), dt, i) for i, dt in enumerate(ALL_TORCH_DTYPES)}
    tensors, info = lmcore.load(str(save(tmp_path, sd)), with_info=True)
    assert info["format"] == "pytorch-zip"
    assert list(tensors) == list(sd)
    for k, x in sd.items():
        assert_same(tensors[k], x, k)


def test_views_slices_transposes_and_shared_storage(tmp_path):
    base = random_tensor((8, 6), torch.float32, 1)
    emb = random_tensor((10, 4), torch.bfloat16, 2)
    sd = {"base": base, "row": base[2], "cols": base[:, 1::2], "t": base.t(), "tail": base.view(-1)[5:],
          "emb": emb, "head": emb, "scalar": torch.tensor(3.5), "empty": torch.empty(0, 3),
          "expanded": random_tensor((3, 1), torch.int32, 3).expand(3, 4)}
    t = lmcore.load(str(save(tmp_path, sd)))
    for k, x in sd.items():
        assert_same(t[k], x, k)
        if x.numel():
            assert tuple(t[k].strides) == x.stride(), k
            assert t[k].storage_offset == x.storage_offset(), k
    # Views of one storage share memory in the result, as in torch.
    for k in ["row", "cols", "t", "tail"]:
        assert lm_address(t[k]) == lm_address(t["base"]), k
    assert lm_address(t["head"]) == lm_address(t["emb"])


def test_nested_dicts_flatten_or_keep_structure(tmp_path):
    a, b, c = (random_tensor((3,), torch.float32, i) for i in range(3))
    obj = {"model": {"enc": {"w": a}, "dec": {"w": b}}, "layers": [c, a], "step": 12, "lr": 0.5, "name": "adam",
           "opt": {"state": {0: {"exp_avg": b}}}}
    t, info = lmcore.load(str(save(tmp_path, obj)), with_info=True)
    assert list(t) == ["model.enc.w", "model.dec.w", "layers.0", "layers.1", "opt.state.0.exp_avg"]
    assert_same(t["layers.1"], a)
    assert info["metadata"]["step"] == "12" and info["metadata"]["name"] == "adam"
    assert lm_address(t["layers.1"]) == lm_address(t["model.enc.w"])
    tree = lmcore.load(str(tmp_path / "m.pt"), keep_structure=True)
    assert_same(tree["model"]["dec"]["w"], b)
    assert_same(tree["layers"][0], c)
    assert tree["step"] == "12"


def test_real_module_state_dict(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.TransformerEncoderLayer(16, 2, 32),
                                torch.nn.LayerNorm(16), torch.nn.Linear(16, 50))
    model[3].weight = model[0].weight  # tied embedding
    model.half()
    sd = model.state_dict()
    t = lmcore.load(str(save(tmp_path, sd)))
    assert list(t) == list(sd)
    for k, x in sd.items():
        assert_same(t[k], x, k)
    assert lm_address(t["3.weight"]) == lm_address(t["0.weight"])


def test_parameters_and_requires_grad(tmp_path):
    """Parameters (trainable or frozen) and tensors with requires_grad load as their data, bit for bit;
    requires_grad is not kept (lmcore/io/checkpoint.h), so saving them again gives torch plain tensors."""
    p = torch.nn.Parameter(random_tensor((4, 4), torch.float32, 5))
    frozen = torch.nn.Parameter(random_tensor((3,), torch.bfloat16, 6), requires_grad=False)
    leaf = torch.linspace(-1, 1, 5, dtype=torch.float64).requires_grad_()
    sd = {"p": p, "frozen": frozen, "leaf": leaf, "buf": torch.ones(2)}
    path = save(tmp_path, sd)
    # The file really holds pickled Parameters and a requires_grad=True tensor (so this test reads them).
    with zipfile.ZipFile(path) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert b"torch._utils\n_rebuild_parameter" in pkl
    raw = torch.load(path)
    assert raw["p"].requires_grad and not raw["frozen"].requires_grad and raw["leaf"].requires_grad
    t = lmcore.load(str(path))
    assert list(t) == list(sd)
    for k, x in sd.items():
        assert_same(t[k], x.detach(), k)
        assert not hasattr(t[k], "requires_grad"), k
    again = tmp_path / "again.pt"
    lmcore.save_torch(str(again), t)
    back = torch.load(again, weights_only=True)
    for k, x in sd.items():
        assert type(back[k]) is torch.Tensor and not back[k].requires_grad, k
        assert back[k].dtype == x.dtype and torch_bytes(back[k]) == torch_bytes(x.detach()), k


def test_single_tensor_and_lists(tmp_path):
    x = random_tensor((2, 3), torch.float64, 6)
    assert_same(lmcore.load(str(save(tmp_path, x)))["tensor"], x)
    assert_same(lmcore.load(str(save(tmp_path, [x, x], "l.pt")))["1"], x)


def test_legacy_format(tmp_path):
    sd = {f"t{i}": random_tensor((3, 4), dt, i) for i, dt in enumerate(ALL_TORCH_DTYPES)}
    base = random_tensor((6, 5), torch.float32, 99)
    sd.update({"base": base, "view": base[1:, ::2], "nested": {"x": base.t()}})
    path = save(tmp_path, sd, _use_new_zipfile_serialization=False)
    t, info = lmcore.load(str(path), with_info=True)
    assert info["format"] == "pytorch-legacy"
    for k, x in sd.items():
        if isinstance(x, dict):
            continue
        assert_same(t[k], x, k)
    assert_same(t["nested.x"], base.t())
    assert tuple(t["view"].strides) == sd["view"].stride()


class _LegacyStorage:
    """A float storage in a hand-written legacy file: root storage `key`, or the view (view_key, offset,
    size) of it that PyTorch before 0.4 wrote (torch 1.13 writes none but still reads them)."""

    def __init__(self, key, numel, view=None):
        self.key, self.numel, self.view = key, numel, view


class _LegacyTensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class _LegacyPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _LegacyStorage):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel, obj.view)
        return None


def write_legacy(path, obj, roots):
    """The legacy torch.save layout, written independently: magic, protocol, sys_info, the object, the
    root storage keys, then each root's element count and bytes."""
    with open(path, "wb") as f:
        pickle.dump(0x1950a86a20f9469cfc6c, f, protocol=2)
        pickle.dump(1001, f, protocol=2)
        pickle.dump({"protocol_version": 1001, "little_endian": True,
                     "type_sizes": {"short": 2, "int": 4, "long": 8}}, f, protocol=2)
        _LegacyPickler(f, protocol=2).dump(obj)
        pickle.dump(list(roots), f, protocol=2)
        for x in roots.values():
            f.write(struct.pack("<q", x.numel()))
            f.write(torch_bytes(x))


def test_legacy_storage_views(tmp_path):
    root = random_tensor((20,), torch.float32, 5)
    whole = _LegacyStorage("0", 20)
    v1 = _LegacyStorage("0", 20, ("v1", 4, 10))
    v2 = _LegacyStorage("0", 20, (7, 15, 5))  # an integer view key
    obj = {"whole": _LegacyTensor(whole, 0, (20,), (1,)), "a": _LegacyTensor(v1, 2, (2, 3), (3, 1)),
           "a_t": _LegacyTensor(v1, 2, (3, 2), (1, 3)), "tail": _LegacyTensor(v2, 1, (4,), (1,))}
    path = tmp_path / "views.pt"
    write_legacy(path, obj, {"0": root})
    ref = torch.load(path)  # torch 1.13 reads views: the reference
    assert torch_bytes(ref["a"]) == torch_bytes(root[6:12].view(2, 3))
    t, info = lmcore.load(str(path), with_info=True)
    assert info["format"] == "pytorch-legacy"
    for k, x in ref.items():
        assert_same(t[k], x, k)
        assert tuple(t[k].strides) == x.stride(), k
    # Views share the root's memory: element 0 of view v1 is element 4 of the root.
    assert lm_address(t["a"]) == lm_address(t["whole"]) + 4 * 4
    assert lm_address(t["a_t"]) == lm_address(t["a"])
    assert lm_address(t["tail"]) == lm_address(t["whole"]) + 15 * 4
    # A view that runs past its root is refused, naming both.
    bad = tmp_path / "bad.pt"
    write_legacy(bad, {"x": _LegacyTensor(_LegacyStorage("0", 20, ("v9", 18, 5)), 0, (5,), (1,))}, {"0": root})
    with pytest.raises(lmcore.Error, match=r"storage view 'v9' covers elements \[18, 23\) of storage '0', which holds 20"):
        lmcore.load(str(bad))


def rewrite_zip(src, dst, transform=lambda name, data: data, compression=zipfile.ZIP_STORED, zip64=False,
                extra=None):
    old_limit = zipfile.ZIP64_LIMIT
    if zip64:
        zipfile.ZIP64_LIMIT = 0  # forces ZIP64 extra fields and the ZIP64 end record
    try:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=compression) as zout:
            for item in zin.infolist():
                zout.writestr(item.filename, transform(item.filename, zin.read(item.filename)),
                              compress_type=compression)
            for name, data in (extra or {}).items():
                zout.writestr(name, data)
    finally:
        zipfile.ZIP64_LIMIT = old_limit


def test_crc_is_checked_on_demand(tmp_path):
    x = torch.full((64,), 1.5)
    path = save(tmp_path, {"w": x})
    damaged = bytearray(path.read_bytes())
    damaged[damaged.find(torch_bytes(x)) + 20] ^= 0x40  # element 5
    bad = tmp_path / "bad.pt"
    bad.write_bytes(bytes(damaged))
    assert torch.load(bad)["w"][5].item() != 1.5  # torch 1.13 does not check it either
    assert lmcore.load(str(bad))["w"].numpy()[5] != 1.5  # default: zero-copy, not read at load time
    with pytest.raises(lmcore.Error, match=r"bad\.pt: entry '.*/data/0': CRC-32"):
        lmcore.load(str(bad), verify_crc=True)
    assert_same(lmcore.load(str(path), verify_crc=True)["w"], x)


def test_zip64_archive(tmp_path):
    sd = {"a": random_tensor((64,), torch.float32, 1), "b": random_tensor((3, 3), torch.int64, 2)}
    src = save(tmp_path, sd)
    dst = tmp_path / "z64.pt"
    rewrite_zip(src, dst, zip64=True)
    assert b"PK\x06\x06" in dst.read_bytes()
    assert torch_bytes(torch.load(dst)["a"]) == torch_bytes(sd["a"])  # a valid archive for torch too
    t = lmcore.load(str(dst))
    for k, x in sd.items():
        assert_same(t[k], x, k)


def test_deflated_archive(tmp_path):
    sd = {"a": random_tensor((100,), torch.float16, 1), "b": torch.zeros(1000)}
    dst = tmp_path / "deflated.pt"
    rewrite_zip(save(tmp_path, sd), dst, compression=zipfile.ZIP_DEFLATED)
    t = lmcore.load(str(dst))
    for k, x in sd.items():
        assert_same(t[k], x, k)


def test_big_endian_archive(tmp_path):
    sd = {"a": random_tensor((5, 3), torch.float32, 1), "b": random_tensor((4,), torch.float32, 2)}

    def to_big(name, data):
        if "/data/" in name:
            return b"".join(data[i:i + 4][::-1] for i in range(0, len(data), 4))
        return data

    dst = tmp_path / "be.pt"
    src = save(tmp_path, sd)
    with zipfile.ZipFile(src) as z:
        assert not any(n.endswith("/byteorder") for n in z.namelist())  # torch 1.13 writes none
        prefix = z.namelist()[0].split("/")[0]
    rewrite_zip(src, dst, to_big, extra={f"{prefix}/byteorder": b"big"})
    t = lmcore.load(str(dst))
    for k, x in sd.items():
        assert_same(t[k], x, k)


@pytest.mark.parametrize("dtype", ALL_TORCH_DTYPES)
def test_torch_weights_only_reads_lmcore_pt(tmp_path, dtype):
    x = random_tensor((4, 6), dtype, 3)
    path = tmp_path / "lm.pt"
    lmcore.save_torch(str(path), {"x": x, "scalar": x[1, 2].clone(), "empty": x[:0]})
    back = torch.load(path, weights_only=True)
    assert list(back) == ["x", "scalar", "empty"]
    assert torch_bytes(back["x"]) == torch_bytes(x) and back["x"].dtype == dtype
    assert back["scalar"].shape == () and torch_bytes(back["scalar"]) == torch_bytes(x[1, 2])
    assert back["empty"].shape == (0, 6)


def test_lmcore_pt_keeps_sharing_and_views_for_torch(tmp_path):
    base = random_tensor((8, 6), torch.float32, 7)
    sd = {"base": base, "t": base.t(), "cols": base[:, 1::2], "tied": base}
    loaded = lmcore.load(str(save(tmp_path, sd)))
    path = tmp_path / "again.pt"
    lmcore.save_torch(str(path), loaded)
    back = torch.load(path, weights_only=True)
    for k, x in sd.items():
        assert torch_bytes(back[k]) == torch_bytes(x), k
        assert back[k].stride() == x.stride(), k
    assert back["t"].storage().data_ptr() == back["base"].storage().data_ptr()
    assert back["tied"].data_ptr() == back["base"].data_ptr()


def hostile_archive(tmp_path, pickle_bytes):
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle_bytes)
        z.writestr("evil/version", "3\n")
    return path


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/lmcore_pwned",))


def test_malicious_pickles_are_refused_without_side_effects(tmp_path):
    marker = "/tmp/lmcore_pwned"
    if os.path.exists(marker):
        os.remove(marker)
    cases = {
        b"cos\nsystem\n(X\x04\x00\x00\x00echotR.": "'os.system'",
        pickle.dumps({"w": Evil()}, protocol=2): "'posix.system'",
        pickle.dumps({"w": Evil()}, protocol=4): "'posix.system'",
        b"\x80\x02cbuiltins\neval\nX\x06\x00\x00\x001+1+1\x85R.": "'builtins.eval'",
        b"\x80\x02cbuiltins\ngetattr\n.": "'builtins.getattr'",
        b"\x80\x02(cos\nsystem\nX\x02\x00\x00\x00idtR.": "'os.system'",
    }
    for data, needle in cases.items():
        with pytest.raises(lmcore.Error, match=needle.replace(".", r"\.")):
            lmcore.load(str(hostile_archive(tmp_path, data)))
    assert not os.path.exists(marker)
    # torch's weights_only loader refuses the same file.
    with pytest.raises(Exception):
        torch.load(hostile_archive(tmp_path, pickle.dumps({"w": Evil()}, protocol=2)), weights_only=True)
    assert not os.path.exists(marker)


def test_unknown_bytes_error_shows_them(tmp_path):
    p = tmp_path / "x.pt"
    p.write_bytes(b"\x89PNG\r\n\x1a\nrest")
    with pytest.raises(lmcore.Error, match="89 50 4e 47"):
        lmcore.load(str(p))
    g = tmp_path / "m.bin"
    g.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(16))
    with pytest.raises(lmcore.Error, match="GGUF"):
        lmcore.load(str(g))
    assert lmcore.detect_format(str(g)) == "gguf"
