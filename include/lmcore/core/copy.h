// lmcore/core/copy.h — copy with cast between any two dtypes, strided and broadcasting.
//
// copy_cast(src, dst) writes dst[i] = cast(src[broadcast(i)]) for every element of dst; src must
// broadcast to dst's shape. Casts follow torch 1.13: to a low-precision float through f32 (round to
// nearest even, NaN/Inf kept), to bool as (x != 0, so NaN is true), from bool as 0/1.
//
// Float to integer truncates toward zero. C++ leaves NaN, infinities and values out of range
// undefined, and torch takes whatever its CPU gives; lmcore defines them as torch 1.13 gives them on
// x86-64, bit for bit:
//   * i64 (and u64): through a 64-bit conversion; NaN, +-Inf and anything outside (-2^63, 2^63) give
//     INT64_MIN (-9223372036854775808; for u64 its bits, 2^63);
//   * i32, i16, i8: through a 32-bit conversion; NaN, +-Inf and anything outside (-2^31-1, 2^31) give
//     INT32_MIN, then the low 16 or 8 bits are kept (so 0 for i16 and i8; 300.7 -> i8 gives 44);
//   * u8 (torch converts through int64 for it), u16 and u32 (which torch lacks): through the 64-bit
//     conversion, then the low bits (-2.5 -> u8 gives 254; NaN gives 0).
// A scalar given to full() or fill_() is checked instead, as torch does: an integer dtype takes only
// values within its range (NaN, Inf, 128 for i8 and -1 for u8 are errors; 2.7 -> 2).
#pragma once

#include "lmcore/core/tensor.h"

namespace lmcore {

void copy_cast(const Tensor& src, Tensor& dst);

// Plain element-by-element version of copy_cast, the reference its tests compare against.
void copy_cast_reference(const Tensor& src, Tensor& dst);

// The dense f32 <-> bf16/f16 loops of copy_cast on raw buffers of n elements, for kernels that round
// tiles (attention's P, the loss's gradients) between matrix products: same bits as copy_cast, single
// thread. `lowp` is DType::bf16 or DType::f16.
void cast_f32_to_lowp(DType lowp, void* dst, const float* src, std::int64_t n);
void cast_lowp_to_f32(DType lowp, float* dst, const void* src, std::int64_t n);

namespace detail {

// One element's cast, shared by the fast kernels and the reference so both give the same bits.
template <typename Dst, typename Src>
inline Dst cast_element(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return load_as_compute(v) != 0;
  } else if constexpr (is_low_precision_v<Dst>) {
    return Dst::from_f32(static_cast<float>(load_as_compute(v)));
  } else if constexpr (std::is_integral_v<Dst> && std::is_floating_point_v<compute_t<Src>>) {
    // The rules are at the top of this file: what x86-64's cvtt instructions give, as torch 1.13 there.
    const double x = static_cast<double>(load_as_compute(v));
    if constexpr (std::is_signed_v<Dst> && sizeof(Dst) <= 4) {
      // 32-bit conversion (cvttss2si/cvttsd2si with a 32-bit destination), then the low bits.
      if (!(x > -2147483649.0 && x < 2147483648.0)) return static_cast<Dst>(std::numeric_limits<std::int32_t>::min());
      return static_cast<Dst>(static_cast<std::int32_t>(x));
    } else {
      // 64-bit conversion, then the low bits (u8, u16, u32) or all of them (i64, u64).
      if (!(x > -9223372036854777856.0 && x < 9223372036854775808.0))
        return static_cast<Dst>(std::numeric_limits<std::int64_t>::min());
      return static_cast<Dst>(static_cast<std::int64_t>(x));
    }
  } else {
    return static_cast<Dst>(load_as_compute(v));
  }
}

// Throws Error "<op>: value nan cannot be converted to i32 without overflow (i32 holds -2147483648 to
// 2147483647)" when `value` is not within an integer dtype's range (torch's rule for scalars); any
// value fits a float dtype or bool.
void check_scalar_fits(double value, DType dtype, const char* op);

}  // namespace detail
}  // namespace lmcore
