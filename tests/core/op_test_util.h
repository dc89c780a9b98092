// Helpers for the op tests: random tensors of any dtype, strided variants, and comparisons that
// report the first mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lmcore/core/tensor.h"

namespace lmcore::testing {

// The dtypes torch computes with (storage-only ones excluded).
inline const std::vector<DType>& compute_dtypes() {
  static const std::vector<DType> v{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                    DType::u8,  DType::i16, DType::i32, DType::i64,  DType::boolean};
  return v;
}
inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> v{DType::f32, DType::f64, DType::f16, DType::bf16};
  return v;
}

// Sizes around the vector widths (4, 8, 16, 32 lanes) and a few longer ones.
inline const std::vector<std::int64_t>& awkward_sizes() {
  static const std::vector<std::int64_t> v{1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 1000};
  return v;
}

// Uniform values in [lo, hi) rounded to integers when the dtype is not floating (bool: 0/1), so ties
// happen; cast to dtype.
inline Tensor random_tensor(const Shape& shape, DType dtype, std::uint32_t seed, double lo = -4.0, double hi = 4.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  const std::int64_t n = checked_numel(shape);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    x = dist(gen);
    if (!is_floating(dtype)) x = std::floor(x);
    if (dtype == DType::boolean) x = x > (lo + hi) / 2 ? 1 : 0;
    if (dtype == DType::u8 && x < 0) x = -x;
  }
  return Tensor::from_vector(v, shape).to(dtype);
}

// A non-contiguous tensor with the same values: every other element of a twice-as-wide buffer along
// the last dim (the rest filled with a sentinel that must never be read).
inline Tensor strided_copy(const Tensor& t) {
  if (t.dim() == 0) return t;
  Shape wide = t.shape();
  wide.back() *= 2;
  Tensor buf = Tensor::full(wide, 77.0, t.dtype());
  Tensor view = buf.slice(-1, 0, wide.back(), 2);
  view.copy_(t);
  return view;
}

// Bitwise equality of two tensors' elements (shapes must match); NaNs compare by bits too.
inline ::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << "dtypes " << a.dtype() << " vs " << b.dtype();
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  const std::size_t item = a.itemsize();
  int mismatches = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * item, pb + i * item, item) != 0) ++mismatches;
  if (mismatches == 0) return ::testing::AssertionSuccess();
  const auto va = ca.reshape({-1}).to_vector<double>(), vb = cb.reshape({-1}).to_vector<double>();
  std::string detail;
  int shown = 0;
  for (std::size_t i = 0; i < va.size() && shown < 5; ++i)
    if (std::memcmp(pa + i * item, pb + i * item, item) != 0) {
      detail += " [" + std::to_string(i) + "] " + std::to_string(va[i]) + " vs " + std::to_string(vb[i]);
      ++shown;
    }
  return ::testing::AssertionFailure() << mismatches << " of " << a.numel() << " elements differ:" << detail;
}

// |a - b| <= atol + rtol * |b| elementwise (NaN only equal to NaN, infinities must match exactly).
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << "dtypes " << a.dtype() << " vs " << b.dtype();
  const auto va = a.reshape({-1}).to_vector<double>(), vb = b.reshape({-1}).to_vector<double>();
  int bad = 0;
  double worst = 0;
  std::string detail;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double x = va[i], y = vb[i];
    bool ok;
    if (std::isnan(x) || std::isnan(y)) ok = std::isnan(x) && std::isnan(y);
    else if (std::isinf(x) || std::isinf(y)) ok = x == y;
    else ok = std::abs(x - y) <= atol + rtol * std::abs(y);
    if (!ok) {
      worst = std::max(worst, std::abs(x - y));
      if (++bad <= 5) detail += " [" + std::to_string(i) + "] " + std::to_string(x) + " vs " + std::to_string(y);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << va.size() << " elements differ (max |diff| " << worst
                                       << "):" << detail;
}

// Runs fn and checks it throws lmcore::Error whose message contains every one of `parts`.
template <typename Fn>
::testing::AssertionResult throws_with(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message '" << msg << "' lacks '" << p << "'";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no lmcore::Error thrown";
}

}  // namespace lmcore::testing
