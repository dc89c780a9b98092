// Highway kernels for the f32 <-> bf16/f16 casts, compiled once per SIMD target and dispatched at
// run time. Each reproduces the scalar cast in low_precision.h bit for bit (tests/core/cast_test.cpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/cast_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "lmcore/core/internal/simd_dispatch.h"
#include "src/core/cast_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// f32 -> bf16: add 0x7FFF plus the lowest kept bit (ties to even), keep the top half; NaN -> 0xFFFF.
void F32ToBF16(bf16* HWY_RESTRICT dst, const float* HWY_RESTRICT src, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> du16;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  auto* out = reinterpret_cast<std::uint16_t*>(dst);
  const auto bias = hn::Set(du, 0x7FFFu);
  const auto one = hn::Set(du, 1u);
  const auto nan_bits = hn::Set(du, 0xFFFFu);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, src + i);
    const auto u = hn::BitCast(du, v);
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(bias, hn::And(hn::ShiftRight<16>(u), one))));
    const auto is_nan = hn::RebindMask(du, hn::IsNaN(v));
    hn::StoreU(hn::TruncateTo(du16, hn::IfThenElse(is_nan, nan_bits, rounded)), du16, out + i);
  }
  for (; i < n; ++i) dst[i] = bf16::from_f32(src[i]);
}

void BF16ToF32(float* HWY_RESTRICT dst, const bf16* HWY_RESTRICT src, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> du16;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto* in = reinterpret_cast<const std::uint16_t*>(src);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto wide = hn::PromoteTo(du, hn::LoadU(du16, in + i));
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(wide)), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = src[i].to_f32();
}

// f32 -> f16 without branches: scaling by 2^112 then 2^-110 rounds the mantissa in the FPU (ties to
// even) and flushes overflow to infinity; the exponent is then rebuilt with integer ops.
void F32ToF16(f16* HWY_RESTRICT dst, const float* HWY_RESTRICT src, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> du16;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  auto* out = reinterpret_cast<std::uint16_t*>(dst);
  const auto to_inf = hn::Set(df, 0x1.0p+112f);
  const auto to_zero = hn::Set(df, 0x1.0p-110f);
  const auto exp_mask = hn::Set(du, 0xFF000000u);
  const auto min_bias = hn::Set(du, 0x71000000u);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, src + i);
    const auto w = hn::BitCast(du, v);
    const auto shl1 = hn::Add(w, w);
    const auto sign = hn::ShiftRight<16>(hn::And(w, hn::Set(du, 0x80000000u)));
    auto base = hn::Mul(hn::Mul(hn::Abs(v), to_inf), to_zero);
    const auto bias = hn::Max(hn::And(shl1, exp_mask), min_bias);
    base = hn::Add(hn::BitCast(df, hn::Add(hn::ShiftRight<1>(bias), hn::Set(du, 0x07800000u))), base);
    const auto bits = hn::BitCast(du, base);
    const auto nonsign = hn::Add(hn::And(hn::ShiftRight<13>(bits), hn::Set(du, 0x7C00u)),
                                 hn::And(bits, hn::Set(du, 0x0FFFu)));
    const auto is_nan = hn::Gt(shl1, exp_mask);
    const auto result = hn::Or(sign, hn::IfThenElse(is_nan, hn::Set(du, 0x7E00u), nonsign));
    hn::StoreU(hn::TruncateTo(du16, result), du16, out + i);
  }
  for (; i < n; ++i) dst[i] = f16::from_f32(src[i]);
}

// f16 -> f32 with integer ops (the same bits on every target, F16C or not): move exponent and
// mantissa into place and rebias the exponent; infinity and NaN get the f32 all-ones exponent (the
// NaN payload kept); a subnormal's mantissa is read as 2^-14 * (1 + m/1024) and 2^-14 subtracted.
void F16ToF32(float* HWY_RESTRICT dst, const f16* HWY_RESTRICT src, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> du16;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto* in = reinterpret_cast<const std::uint16_t*>(src);
  const auto exp_mask = hn::Set(du, 0x0F800000u);  // the f16 exponent field after the shift by 13
  const auto rebias = hn::Set(du, (127u - 15u) << 23);
  const auto inf_nan_extra = hn::Set(du, (128u - 16u) << 23);
  const auto subnormal_one = hn::Set(du, 1u << 23);
  const auto two_pow_minus_14 = hn::Set(df, 0x1.0p-14f);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto h = hn::PromoteTo(du, hn::LoadU(du16, in + i));
    const auto shifted = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7FFFu)));
    const auto exp = hn::And(shifted, exp_mask);
    const auto normal = hn::Add(shifted, rebias);
    const auto inf_nan = hn::Add(normal, inf_nan_extra);
    const auto subnormal =
        hn::BitCast(du, hn::Sub(hn::BitCast(df, hn::Add(normal, subnormal_one)), two_pow_minus_14));
    auto bits = hn::IfThenElse(hn::Eq(exp, exp_mask), inf_nan, normal);
    bits = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), subnormal, bits);
    const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
    hn::StoreU(hn::BitCast(df, hn::Or(bits, sign)), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = src[i].to_f32();
}

}  // namespace lmcore::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::detail {

HWY_EXPORT(F32ToBF16);
HWY_EXPORT(BF16ToF32);
HWY_EXPORT(F32ToF16);
HWY_EXPORT(F16ToF32);

void cast_f32_to_bf16(bf16* dst, const float* src, std::int64_t n) { LMCORE_DISPATCH(F32ToBF16)(dst, src, n); }
void cast_bf16_to_f32(float* dst, const bf16* src, std::int64_t n) { LMCORE_DISPATCH(BF16ToF32)(dst, src, n); }
void cast_f32_to_f16(f16* dst, const float* src, std::int64_t n) { LMCORE_DISPATCH(F32ToF16)(dst, src, n); }
void cast_f16_to_f32(float* dst, const f16* src, std::int64_t n) { LMCORE_DISPATCH(F16ToF32)(dst, src, n); }

}  // namespace lmcore::detail
#endif
