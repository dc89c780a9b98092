// lmcore/core/copy.h — copy with cast between any two dtypes, strided and broadcasting.
//
// copy_cast(src, dst) writes dst[i] = cast(src[broadcast(i)]) for every element of dst; src must
// broadcast to dst's shape. Casts follow torch: to a low-precision float through f32 (round to
// nearest even, NaN/Inf kept), to bool as (x != 0), from bool as 0/1, float to integer truncating
// toward zero (out of range or NaN gives the integer type's minimum, as x86 does).
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
    const auto x = load_as_compute(v);
    // Truncation of values outside the int64 range is undefined in C++; give what x86's cvtt does.
    if (!(x > -9.2233720368547758e18 && x < 9.2233720368547758e18))
      return static_cast<Dst>(std::numeric_limits<std::int64_t>::min());
    if constexpr (sizeof(Dst) == 8 && !std::is_signed_v<Dst>) return static_cast<Dst>(static_cast<std::int64_t>(x));
    else return static_cast<Dst>(static_cast<std::int64_t>(x));
  } else {
    return static_cast<Dst>(load_as_compute(v));
  }
}

}  // namespace detail
}  // namespace lmcore
