// Error bounds for kernel tests, scaled by the result dtype's epsilon and the tensor's magnitude, and
// shown on every use to reject a 1% error:
//
//   |got - want| <= eps(dtype) (a max|want| + r |want|)
//
// `a` covers the spread of rounding across a tensor (errors of sums follow the largest terms, not the
// element), `r` the final rounding of each element. close_within() also checks that the same bound
// rejects got with (1) its element of largest |want| off by 1% of itself and (2) its element of smallest
// |want| off by 1% of max|want|. With LMCORE_TEST_REPORT_ERRORS=1 in the environment it prints the
// measured error in these units, which is how the figures in the test files' comments were taken:
//
//   LMCORE_TEST_REPORT_ERRORS=1 build/release/tests/attention/test_attention | grep '^\[error\]'
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lmcore/core/tensor.h"

namespace lmcore::bounds {

// |got - want| <= atol + rtol |want| everywhere; infinities must match; NaN never passes.
inline ::testing::AssertionResult within(const std::string& name, const Tensor& got, const Tensor& want, double atol,
                                         double rtol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << name << ": shape " << shape_str(got.shape()) << " vs "
                                         << shape_str(want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = -1;
  std::size_t at = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool finite = std::isfinite(w[i]);
    const double err = !finite && g[i] == w[i] ? 0.0 : std::abs(g[i] - w[i]);
    if (!(err <= atol + (finite ? rtol * std::abs(w[i]) : 0.0))) {
      ++bad;
      if (!(err <= worst)) worst = err, at = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << name << ": " << bad << " of " << g.size() << " elements outside " << atol
                                       << " + " << rtol << " |want|; worst at flat " << at << ": got " << g[at]
                                       << ", want " << w[at] << " (|diff| " << worst << ")";
}

// Machine epsilon (the spacing of 1.0) of a result dtype: f32 2^-23, f16 2^-10, bf16 2^-7.
inline double epsilon_of(DType d) {
  switch (d) {
    case DType::bf16: return 0x1p-7;
    case DType::f16: return 0x1p-10;
    case DType::f64: return 0x1p-52;
    default: return 0x1p-23;
  }
}

// The largest finite |x| of a tensor.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>())
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// A bound in units of the dtype's epsilon: |got - want| <= eps (a max|want| + r |want|). `a` covers the
// rounding spread across the tensor (errors of sums scale with the largest terms, not with the element),
// `r` the final rounding of each element.
struct Bound {
  double a, r;
};

// The measured error of a comparison, in the units of Bound: prints "name: max |diff| = X eps max|want|;
// worst element uses Y of the bound" when LMCORE_TEST_REPORT_ERRORS is set (how the figures in the test
// files' comments were taken).
inline void report_error(const std::string& name, const Tensor& got, const Tensor& want, DType dtype, Bound b,
                         double terms = 0) {
  if (std::getenv("LMCORE_TEST_REPORT_ERRORS") == nullptr) return;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const double eps = epsilon_of(dtype), scale = std::max(max_abs(want), terms);
  double worst = 0, used = 0;
  for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
    if (!std::isfinite(w[i])) continue;
    const double err = std::abs(g[i] - w[i]);
    worst = std::max(worst, err);
    used = std::max(used, err / (eps * (b.a * scale + b.r * std::abs(w[i]))));
  }
  std::printf("[error] %-40s %-4s scale %-10.4g max|diff| %-10.3g = %7.3f eps scale; %5.1f%% of the bound\n",
              name.c_str(), std::string(dtype_name(dtype)).c_str(), scale, worst,
              scale > 0 ? worst / (eps * scale) : 0.0, 100 * used);
}

// got against want within Bound b for results stored in `dtype`, and the demonstration that the bound
// is tight enough: the same comparison rejects got with (1) its element of largest |want| off by 1% of
// itself, and (2) its element of smallest |want| off by 1% of max|want|. `terms`, when larger than
// max|want|, replaces it as the magnitude: for a result that cancels to (near) zero, the size of the
// terms that cancel.
inline ::testing::AssertionResult close_within(const std::string& name, const Tensor& got, const Tensor& want,
                                               DType dtype, Bound b, double terms = 0) {
  const double eps = epsilon_of(dtype), scale = std::max(max_abs(want), terms);
  const double atol = b.a * eps * scale, rtol = b.r * eps;
  report_error(name, got, want, dtype, b, terms);
  ::testing::AssertionResult ok = within(name, got, want, atol, rtol);
  if (!ok) return ok;
  const std::vector<double> w = want.to_vector<double>();
  if (w.empty() || scale == 0) return ok;
  std::size_t big = 0, small = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) continue;
    if (std::abs(w[i]) > std::abs(w[big]) || !std::isfinite(w[big])) big = i;
    if (std::abs(w[i]) < std::abs(w[small]) || !std::isfinite(w[small])) small = i;
  }
  std::vector<double> g = got.to_vector<double>();
  const std::vector<double> saved = g;
  g[big] += 0.01 * w[big];
  if (w[big] != 0 && within(name, Tensor::from_vector(g, got.shape()), want, atol, rtol))
    return ::testing::AssertionFailure() << name << ": the bound (" << b.a << " eps max|want| + " << b.r
                                         << " eps |want|) also passes a 1% error at the largest element";
  g = saved;
  g[small] += 0.01 * scale;
  if (within(name, Tensor::from_vector(g, got.shape()), want, atol, rtol))
    return ::testing::AssertionFailure() << name << ": the bound (" << b.a << " eps max|want| + " << b.r
                                         << " eps |want|) also passes an error of 1% of max|want| at the smallest element";
  return ok;
}

}  // namespace lmcore::bounds
