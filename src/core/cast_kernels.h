// Dense (contiguous) cast loops used by copy_cast. The generic loop is the scalar cast; the f32 <->
// bf16/f16 pairs, which dominate mixed-precision training, get Highway kernels (cast_kernels.cpp)
// that produce the same bits.
#pragma once

#include <cstdint>

#include "lmcore/core/copy.h"

namespace lmcore {

namespace detail {
void cast_f32_to_bf16(bf16* dst, const float* src, std::int64_t n);
void cast_bf16_to_f32(float* dst, const bf16* src, std::int64_t n);
void cast_f32_to_f16(f16* dst, const float* src, std::int64_t n);
void cast_f16_to_f32(float* dst, const f16* src, std::int64_t n);
}  // namespace detail

template <typename D, typename S>
inline void cast_contiguous(D* dst, const S* src, std::int64_t n) {
  if constexpr (std::is_same_v<D, bf16> && std::is_same_v<S, float>) {
    detail::cast_f32_to_bf16(dst, src, n);
  } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, bf16>) {
    detail::cast_bf16_to_f32(dst, src, n);
  } else if constexpr (std::is_same_v<D, f16> && std::is_same_v<S, float>) {
    detail::cast_f32_to_f16(dst, src, n);
  } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, f16>) {
    detail::cast_f16_to_f32(dst, src, n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = detail::cast_element<D>(src[i]);
  }
}

}  // namespace lmcore
