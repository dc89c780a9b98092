#!/usr/bin/python3
"""Writes the seed corpora of the io fuzz targets (tests/io/fuzz/corpus/<target>/): small valid files
made by torch 1.13 and NumPy, and a few malformed ones. Run with /usr/bin/python3 from the repo root;
the outputs are committed, so this only needs rerunning to change the seeds."""
import collections
import io
import json
import pathlib
import pickle
import struct
import zipfile

import numpy as np
import torch

OUT = pathlib.Path(__file__).resolve().parent / "corpus"


def put(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def st(header, data=b""):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


# safetensors headers
put("fuzz_safetensors_header", "two", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                          "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]},
                                          "__metadata__": {"k": "v"}}, bytes(12)))
put("fuzz_safetensors_header", "empty", st({}))
put("fuzz_safetensors_header", "scalar", st({"s": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]}}, bytes(8)))
put("fuzz_safetensors_header", "overlap", st({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                                              "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, bytes(3)))
put("fuzz_safetensors_header", "alltypes", st({d: {"dtype": d, "shape": [1], "data_offsets": [0, 0]} for d in []}))
put("fuzz_safetensors_header", "dup", b'\x1a\x00\x00\x00\x00\x00\x00\x00{"a":"x","a":"y"}         ')
# Issue 13, defect 1: 100,000 nested arrays (200 KB) overflowed the stack; scripts/fuzz's -max_len covers it.
_deep = b'{"__metadata__":{"k":' + b"[" * 100000 + b"]" * 100000 + b"}}"
put("fuzz_safetensors_header", "deep_nesting", struct.pack("<Q", len(_deep)) + _deep)

# torch archives (zip reader) and their pickles (unpickler)
def torch_bytes(obj, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
objs = {
    "state": {"w": base, "t": base.t(), "b": torch.ones(2, dtype=torch.bfloat16)},
    "nested": {"model": {"x": torch.tensor(3)}, "step": 5, "lst": [torch.zeros(1), (1, 2.5, "s")]},
    "param": {"p": torch.nn.Parameter(torch.ones(2))},
}
for name, obj in objs.items():
    data = torch_bytes(obj)
    put("fuzz_zip_reader", name + ".pt", data)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        pkl = [n for n in z.namelist() if n.endswith("data.pkl")][0]
        put("fuzz_unpickler", name + ".pkl", z.read(pkl))
    put("fuzz_unpickler", name + ".legacy", torch_bytes(obj, _use_new_zipfile_serialization=False))
buf = io.BytesIO()
np.savez_compressed(buf, a=np.arange(10), b=np.ones((2, 2), dtype=np.float16))
put("fuzz_zip_reader", "c.npz", buf.getvalue())
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
    z.writestr("a/data.pkl", pickle.dumps({"x": 1}, protocol=2))
    z.writestr("a/version", "3\n")
put("fuzz_zip_reader", "deflated.zip", buf.getvalue())

# legacy files reach load() through the zip target too (it loads any bytes); one with storage views,
# written by hand as PyTorch before 0.4 did: persistent ids with (view_key, offset, size)
put("fuzz_zip_reader", "state.legacy", torch_bytes(objs["state"], _use_new_zipfile_serialization=False))


class LegacyView:
    def __init__(self, view):
        self.view = view

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, (self, 1, (2,), (1,), False, collections.OrderedDict()))


class LegacyPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", torch.FloatStorage, "0", "cpu", 6, obj.view) if isinstance(obj, LegacyView) else None


buf = io.BytesIO()
for head in (0x1950a86a20f9469cfc6c, 1001, {"protocol_version": 1001, "little_endian": True}):
    pickle.dump(head, buf, protocol=2)
LegacyPickler(buf, protocol=2).dump({"a": LegacyView(("v", 2, 3)), "b": LegacyView(None)})
pickle.dump(["0"], buf, protocol=2)
buf.write(struct.pack("<q", 6) + torch.arange(6, dtype=torch.float32).numpy().tobytes())
put("fuzz_zip_reader", "views.legacy", buf.getvalue())

# hostile pickles
put("fuzz_unpickler", "os_system.pkl", b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00id\x85R.")
put("fuzz_unpickler", "proto4.pkl", pickle.dumps({"a": [1, 2, {"b": (None, True)}], "c": b"xy"}, protocol=4))
put("fuzz_unpickler", "deep.pkl", b"\x80\x02" + b"]" * 300 + b"a" * 299 + b".")
