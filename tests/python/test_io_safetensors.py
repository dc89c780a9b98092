"""safetensors: lmcore reads files from an independent writer (every dtype, metadata), and an
independent reader reads lmcore's files (layout rules: sorted names, 8-byte padded header,
contiguous offsets). Malformed headers raise lmcore.Error."""
import json
import struct

import numpy as np
import pytest
import torch

import lmcore
from io_helpers import ALL_TORCH_DTYPES, assert_same, lm_bytes, random_tensor, st_read, st_write, torch_bytes

ST_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
               "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
LM_NAME = {"F64": "f64", "F32": "f32", "F16": "f16", "BF16": "bf16", "I64": "i64", "I32": "i32", "I16": "i16",
           "I8": "i8", "U64": "u64", "U32": "u32", "U16": "u16", "U8": "u8", "BOOL": "bool", "F8_E4M3": "f8_e4m3fn",
           "F8_E5M2": "f8_e5m2"}


def test_reads_every_dtype_from_an_independent_writer(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {}
    for i, (dt, size) in enumerate(ST_ITEMSIZE.items()):
        shape = (3, 1 + i % 4)
        raw = rng.integers(0, 256, size=int(np.prod(shape)) * size, dtype=np.uint8)
        if dt == "BOOL":
            raw &= 1
        arrays[f"x_{dt}"] = (dt, shape, raw.tobytes())
    arrays["zero_d"] = ("F32", (), struct.pack("<f", 1.25))
    arrays["empty"] = ("BF16", (0, 5), b"")
    path = tmp_path / "ind.safetensors"
    st_write(path, arrays, metadata={"source": "independent"})
    t, info = lmcore.load(str(path), with_info=True)
    assert info["format"] == "safetensors"
    assert info["metadata"] == {"source": "independent"}
    for name, (dt, shape, raw) in arrays.items():
        assert t[name].dtype == LM_NAME[dt], name
        assert tuple(t[name].shape) == shape, name
        assert lm_bytes(t[name]) == raw, name


def test_independent_reader_reads_lmcore_files(tmp_path):
    sd = {f"layer.{i}": random_tensor((4, 3), dt, i) for i, dt in enumerate(ALL_TORCH_DTYPES)}
    sd["transposed"] = random_tensor((5, 2), torch.float32, 50).t()
    sd["a_scalar"] = torch.tensor(7, dtype=torch.int64)
    path = tmp_path / "lm.safetensors"
    lmcore.save_safetensors(str(path), sd, {"step": "3"})
    header, arrays, n = st_read(path)
    assert n % 8 == 0
    names = [k for k in header if k != "__metadata__"]
    assert names == sorted(sd)
    assert header["__metadata__"] == {"step": "3"}
    end = 0
    for k in names:
        b, e = header[k]["data_offsets"]
        assert b == end
        end = e
    assert end == path.stat().st_size - 8 - n
    for k, x in sd.items():
        assert arrays[k].tobytes() == torch_bytes(x), k
        assert list(arrays[k].shape) == list(x.shape), k


def test_round_trip_and_zero_copy(tmp_path):
    x = random_tensor((64, 64), torch.bfloat16, 1)
    path = tmp_path / "a.safetensors"
    lmcore.save_safetensors(str(path), {"x": x})
    t, info = lmcore.load(str(path), with_info=True)
    assert_same(t["x"], x)
    _, _, n = st_read(path)
    assert info["offsets"]["x"] == 8 + n
    # Writing to a loaded tensor does not change the file (copy-on-write mapping).
    before = path.read_bytes()
    t["x"].fill_(0.0)
    assert path.read_bytes() == before


def write_raw(path, header_text, data=b""):
    path.write_bytes(struct.pack("<Q", len(header_text)) + header_text + data)
    return str(path)


@pytest.mark.parametrize("header,data,needle", [
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
     bytes(8), "more than once"),
    (b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8), "spans 8 bytes, expected 12"),
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(9), "cover 8 bytes"),
    (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}',
     bytes(6), "overlap"),
    (b'{"__metadata__":{"a":{"nested":"x"}}}', b"", "must be a string"),
    (b'{"\xff":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', b"", "UTF-8"),
])
def test_malformed_files_raise(tmp_path, header, data, needle):
    with pytest.raises(lmcore.Error, match=needle):
        lmcore.load(write_raw(tmp_path / "bad.safetensors", header, data))
