// Helpers for the loss tests: seeded random tensors and a max-difference comparison that names the
// tensor and the first mismatch.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lmcore/core/tensor.h"

namespace lmcore::test {

inline Tensor vec(const std::vector<double>& x, const Shape& shape) { return Tensor::from_vector(x, shape); }
inline Tensor vec(const std::vector<double>& x) { return Tensor::from_vector(x, {static_cast<std::int64_t>(x.size())}); }

inline Tensor random_tensor(const Shape& shape, std::uint32_t seed, double scale = 1.0, DType dtype = DType::f64) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Tensor t = Tensor::empty(shape, DType::f64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t.to(dtype);
}

inline Tensor random_uniform(const Shape& shape, std::uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(shape, DType::f64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// Targets in [0, v), with every `ignore_every`-th one set to ignore_index (0: none ignored).
inline Tensor random_targets(std::int64_t n, std::int64_t v, std::uint32_t seed, int ignore_every = 0,
                             std::int64_t ignore_index = -100) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, v - 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) t[i] = ignore_every > 0 && i % ignore_every == 1 ? ignore_index : dist(rng);
  return Tensor::from_vector(t, {n});
}

// |a - b| <= atol + rtol * |b| elementwise; reports the tensor name, max difference and first mismatch.
inline ::testing::AssertionResult all_close(const char* name, const Tensor& a, const Tensor& b, double rtol,
                                            double atol) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << name << ": shape " << shape_str(a.shape()) << " vs "
                                         << shape_str(b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double max_diff = 0.0;
  std::int64_t first_bad = -1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool both_nan = std::isnan(x[i]) && std::isnan(y[i]);
    const double d = both_nan ? 0.0 : std::abs(x[i] - y[i]);
    if (std::isnan(d) || d > atol + rtol * std::abs(y[i])) {
      if (first_bad < 0) first_bad = static_cast<std::int64_t>(i);
      max_diff = std::isnan(d) ? d : std::max(max_diff, d);
    } else if (!std::isnan(max_diff)) {
      max_diff = std::max(max_diff, d);
    }
  }
  if (first_bad < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << name << ": max |diff| " << max_diff << ", first mismatch at flat index "
                                       << first_bad << ": " << x[static_cast<std::size_t>(first_bad)] << " vs "
                                       << y[static_cast<std::size_t>(first_bad)];
}

}  // namespace lmcore::test
