"""Shared helpers of the checkpoint I/O tests: byte-exact comparisons between lmcore and torch tensors,
and an independent, minimal safetensors reader and writer (written from the format description, not
from lmcore's code)."""
import json
import os
import pathlib
import struct
import subprocess

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LMCORE_BUILD_DIR", ROOT / "build" / "release"))
CLI = BUILD / "lmcore"

ALL_TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool]
LMCORE_NAME = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
               torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
               torch.bool: "bool"}


def run_cli(*args, check=True):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, check=check)


def torch_bytes(x):
    """Row-major bytes of a torch tensor (bf16 through int16: NumPy has no bf16)."""
    x = x.detach().contiguous()
    if x.dtype == torch.bfloat16:
        x = x.view(torch.int16)
    return x.numpy().tobytes()


def lm_bytes(t):
    return np.ascontiguousarray(t.numpy()).tobytes()


def lm_address(t):
    """Address of element 0 of an lmcore tensor's storage (for memory-sharing checks)."""
    a = t.numpy()
    return a.__array_interface__["data"][0] - t.storage_offset * a.itemsize


def random_tensor(shape, dtype, seed):
    """Arbitrary bit patterns (NaN payloads, denormals, negative zero...) for floats; full range for ints."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    itemsize = torch.empty((), dtype=dtype).element_size()
    int_type = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[itemsize]
    info = torch.iinfo(int_type)
    raw = torch.randint(info.min, info.max, shape, generator=g, dtype=int_type)
    return raw.view(dtype) if dtype != int_type else raw


def assert_same(lm, x, name=""):
    assert lm.dtype == LMCORE_NAME[x.dtype], (name, lm.dtype, x.dtype)
    assert tuple(lm.shape) == tuple(x.shape), (name, lm.shape, x.shape)
    assert lm_bytes(lm) == torch_bytes(x), f"{name}: bytes differ"


# ---- an independent safetensors implementation, for cross-checking ----

ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
             "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?", "F8_E4M3": "u1",
             "F8_E5M2": "u1"}


def st_write(path, arrays, metadata=None):
    """arrays: name -> (dtype name, shape, raw bytes)."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in arrays.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def st_read(path):
    """Returns (header dict, {name: numpy array}, header length)."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype=ST_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return header, out, n
