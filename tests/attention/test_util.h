// Shared helpers of the attention tests: seeded random tensors, a closeness check that reports the
// tensor's name, the worst element and its index, and (from tests/common/bounds.h) bounds scaled by the
// dtype's epsilon and the tensor's magnitude that are shown, on every use, to reject a 1% error.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "lmcore/core/tensor.h"
#include "tests/common/bounds.h"

namespace lmcore::attention::testing {

inline Tensor random_tensor(const Shape& shape, std::uint32_t seed, DType dtype = DType::f32, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> values(static_cast<std::size_t>(checked_numel(shape)));
  for (float& x : values) x = dist(gen);
  return Tensor::from_vector(values, shape).to(dtype);
}

// |got - want| <= atol + rtol |want| everywhere; -inf must match -inf; NaN never passes.
inline ::testing::AssertionResult all_close(const std::string& name, const Tensor& got, const Tensor& want,
                                            double atol, double rtol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << name << ": shape " << shape_str(got.shape()) << " vs "
                                         << shape_str(want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  std::size_t at = 0;
  int bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      if (g[i] != w[i]) {
        ++bad;
        if (bad == 1) at = i, worst = INFINITY;
      }
      continue;
    }
    const double err = std::abs(g[i] - w[i]);
    if (!(err <= atol + rtol * std::abs(w[i]))) {
      ++bad;
      if (!(err <= worst)) worst = err, at = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << name << ": " << bad << " of " << g.size() << " elements differ; worst at flat "
                                       << at << ": got " << g[at] << ", want " << w[at] << " (|diff| " << worst << ")";
}

using bounds::Bound;
using bounds::close_within;
using bounds::epsilon_of;
using bounds::max_abs;

}  // namespace lmcore::attention::testing
