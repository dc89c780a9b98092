// Deterministic inputs for the benchmarks: the same values on every run and machine, and cheap to make
// at gigabyte sizes. An LCG, not a quality generator: the benchmarks only need varied data.
#pragma once

#include <cstdint>

#include "lmcore/core/tensor.h"

namespace lmcore::bench {

// Values uniform in [-scale / 2, scale / 2), made in f32 and cast to `dtype`.
inline Tensor random_uniform(const Shape& shape, std::uint32_t seed, float scale = 1.0f, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  std::uint32_t s = seed * 2654435761u + 7;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * scale;
  }
  return dtype == DType::f32 ? t : t.to(dtype);
}

}  // namespace lmcore::bench
