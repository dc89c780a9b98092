// Private: the per-row vector loops only attention needs (the softmax gradient, the mask), compiled
// for every SIMD target with Highway and dispatched at run time. The softmax itself (max, exp, sums,
// scale) uses the row kernels the losses use too, with their NaN rule: lmcore/core/internal/row_kernels.h.
//
// The f64 overloads below serve the f64 kernels (gradient checks, not speed): plain loops with the same
// NaN and infinity rules as the f32 ones.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "lmcore/core/internal/row_kernels.h"

namespace lmcore::attention::detail {

using internal::max_nan;
using internal::row_exp;
using internal::row_exp_sum_store_bf16;
using internal::row_exp_store_sum;
using internal::row_max;
using internal::row_scale;

// ds[j] = p[j] * (dp[j] - delta) (ds may alias dp). NaN in p, dp or delta gives NaN.
void row_softmax_grad(float* ds, const float* p, const float* dp, std::int64_t n, float delta);
// x[j] = mask[j] ? x[j] : -inf (a masked NaN becomes -inf: masked scores are never read).
void row_apply_mask(float* x, const std::uint8_t* mask, std::int64_t n);

inline double max_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : (a < b ? b : a); }
inline double row_max(const double* x, std::int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = max_nan(m, x[j]);
  return m;
}
inline void row_exp(double* x, std::int64_t n, double m) {
  for (std::int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j] - m);
}
inline double row_exp_store_sum(double* x, std::int64_t n, double m) {
  double sum = 0;
  for (std::int64_t j = 0; j < n; ++j) sum += (x[j] = std::exp(x[j] - m));
  return sum;
}
inline void row_scale(double* x, std::int64_t n, double a) {
  for (std::int64_t j = 0; j < n; ++j) x[j] *= a;
}
inline void row_softmax_grad(double* ds, const double* p, const double* dp, std::int64_t n, double delta) {
  for (std::int64_t j = 0; j < n; ++j) ds[j] = p[j] * (dp[j] - delta);
}
inline void row_apply_mask(double* x, const std::uint8_t* mask, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) x[j] = mask[j] ? x[j] : -std::numeric_limits<double>::infinity();
}

}  // namespace lmcore::attention::detail
