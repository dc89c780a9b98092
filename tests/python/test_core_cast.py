"""Casts, copies, views and DLPack through the Python module, against torch 1.13."""
import numpy as np
import pytest
import torch
import torch.utils.dlpack

import lmcore
from core_helpers import ALL_DTYPES, assert_same, rand, strided, to_lm, to_torch

GEN = torch.Generator().manual_seed(99)

NAMES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
         torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
         torch.bool: "bool"}


def special_f32():
    """Random f32 bit patterns plus the values where rounding is delicate."""
    bits = torch.randint(-2**31, 2**31 - 1, (200000,), generator=GEN, dtype=torch.int64).to(torch.int32)
    rnd = bits.view(torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), -float("nan"), 1.0, -1.0,
                             65504.0, 65519.99, 65520.0, -65520.0, 6.1035156e-05, 6.0975552e-05, 5.9604645e-08,
                             2.9802322e-08, 2.9802326e-08, 8.940697e-08, 1e-45, -1e-45, tiny, tiny / 2, 3.4028235e38,
                             -3.4028235e38, 3.3961776e38, 3.3961778e38], dtype=torch.float32)
    # Exact ties for bf16 (low 16 bits 0x8000) with even and odd kept bits, and for f16 (13 bits).
    base = torch.randint(0, 2**15, (4096,), generator=GEN, dtype=torch.int64)
    bf16_ties = ((base << 16) | 0x8000).to(torch.int32).view(torch.float32)
    f16_base = torch.randint(0x33000000 >> 13, 0x47800000 >> 13, (4096,), generator=GEN, dtype=torch.int64)
    f16_ties = ((f16_base << 13) | 0x1000).to(torch.int32).view(torch.float32)
    # f32 subnormals.
    subn = torch.randint(1, 2**23, (4096,), generator=GEN, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([rnd, specials, -specials, bf16_ties, -bf16_ties, f16_ties, -f16_ties, subn, -subn])


@pytest.mark.parametrize("target", [torch.bfloat16, torch.float16])
def test_f32_to_low_precision_is_bit_identical_to_torch(target):
    x = special_f32()
    want = x.to(target).view(torch.int16)
    name = NAMES[target]
    # Vector kernel (contiguous), strided scalar path, and lengths around the vector width.
    got = to_torch(lmcore.cast(to_lm(x), name).view_as_dtype("i16"))
    assert_same(got, want, f"f32 -> {name}")
    # Strided: torch's scalar path writes NaN as 0x7FC0 for bf16 where its vector path writes 0xFFFF
    # (lmcore always writes 0xFFFF), so NaNs are compared as NaNs and everything else bit for bit.
    xs = strided(x[:1001])
    got_s = to_torch(lmcore.cast(to_lm(xs), name))
    want_s = xs.to(target)
    nan = torch.isnan(want_s)
    assert_same(torch.isnan(got_s), nan, "NaN positions")
    assert_same(got_s[~nan].view(torch.int16), want_s[~nan].view(torch.int16), f"f32 -> {name} strided")
    for n in [1, 7, 8, 9, 15, 16, 17, 33]:
        part = x[-n:].contiguous()
        assert_same(to_torch(lmcore.cast(to_lm(part), name).view_as_dtype("i16")), part.to(target).view(torch.int16),
                    f"n={n}")


@pytest.mark.parametrize("src", ALL_DTYPES)
def test_cast_every_pair_matches_torch(src):
    x = rand((5, 7), src, GEN, -100, 100)
    if src.is_floating_point:
        x[0, :3] = torch.tensor([float("nan"), float("inf"), -0.0]).to(src)
    for dst in ALL_DTYPES:
        if src.is_floating_point and not dst.is_floating_point and dst != torch.bool:
            xx = x[1:]  # float -> int of NaN/inf is platform-defined in torch too
        else:
            xx = x
        if src.is_floating_point and dst in (torch.uint8,):
            xx = xx.abs()  # negative float -> uint8 is undefined behaviour in C++ and torch
        want = xx.to(dst)
        got = to_torch(lmcore.cast(to_lm(strided(xx)), NAMES[dst]))
        assert_same(got, want, f"{src} -> {dst}")


def test_copy_cast_into_torch_memory_with_broadcast():
    dst = torch.zeros(3, 4, dtype=torch.bfloat16)
    src = torch.randn(4, generator=GEN)
    lmcore.copy_cast(to_lm(src), to_lm(dst))  # writes through the DLPack view of dst
    assert_same(dst, src.to(torch.bfloat16).expand(3, 4).contiguous())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.float16])
def test_dlpack_both_ways_zero_copy_and_strided(dtype):
    t = rand((6, 8), dtype, GEN, -5, 5)
    v = t[1:, ::2].t()  # offset, strided, transposed
    lm = lmcore.from_dlpack(torch.utils.dlpack.to_dlpack(v))
    assert lm.shape == tuple(v.shape)
    assert lm.strides == tuple(v.stride())
    back = torch.utils.dlpack.from_dlpack(lm)
    assert_same(back, v)
    assert back.data_ptr() == v.data_ptr()  # zero-copy both ways
    # Writes through lmcore are visible to torch.
    lm2 = lmcore.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    lm2.fill_(3)
    assert bool((t == 3).all())
    # A torch tensor is accepted directly (via __dlpack__).
    assert_same(to_torch(lmcore.as_tensor(v).contiguous()), v.contiguous())


def test_tensor_views_match_torch():
    t = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    lm = to_lm(t)
    assert_same(to_torch(lm.transpose(0, 2).contiguous()), t.transpose(0, 2).contiguous())
    assert_same(to_torch(lm.permute([2, 0, 1]).contiguous()), t.permute(2, 0, 1).contiguous())
    assert_same(to_torch(lm.narrow(1, 1, 2).contiguous()), t.narrow(1, 1, 2).contiguous())
    assert_same(to_torch(lm.select(2, 3).contiguous()), t.select(2, 3).contiguous())
    assert_same(to_torch(lm.slice(2, 0, 4, 3).contiguous()), t[:, :, 0:4:3].contiguous())
    assert_same(to_torch(lm.reshape([4, 6])), t.reshape(4, 6))
    assert_same(to_torch(lm.unsqueeze(1).expand([2, 5, 3, 4]).contiguous()), t.unsqueeze(1).expand(2, 5, 3, 4).contiguous())
    assert_same(to_torch(lm.view([6, 4]).squeeze()), t.view(6, 4).squeeze())
    assert tuple(lm.transpose(0, 1).strides) == t.transpose(0, 1).stride()
    with pytest.raises(lmcore.Error):
        lm.transpose(0, 2).view([24])


def test_numpy_round_trip_bool():
    a = np.array([[True, False, True]])
    lm = lmcore.from_numpy(a)
    assert lm.dtype == "bool"
    assert np.array_equal(lm.numpy(), a)
