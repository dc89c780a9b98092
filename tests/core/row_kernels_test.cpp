// The shared softmax row kernels (lmcore/core/internal/row_kernels.h) on every SIMD target Highway
// compiled and this CPU runs (AVX-512, AVX2, SSE4, ... down to the portable EMU128), against plain
// loops in f64: lengths around every vector width (1, N-1, N, N+1, 2N+1, 8N+2 for N up to 16 lanes),
// misaligned starts, and the NaN rule with a NaN at every position of a row, in the body and the tail.
#include "lmcore/core/internal/row_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/common/simd_targets.h"

namespace lmcore::internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<std::int64_t> awkward_lengths() {
  std::vector<std::int64_t> n = {0, 1, 2, 3, 129, 1000};
  for (std::int64_t lanes : {4, 8, 16})
    for (std::int64_t k : {lanes - 1, lanes, lanes + 1, 2 * lanes + 1, 8 * lanes + 2}) n.push_back(k);
  return n;
}

using testing::for_each_simd_target;

// n values (plus 3 spare in front, for misaligned starts) from N(0, scale).
std::vector<float> random_row(std::int64_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(static_cast<std::size_t>(n) + 3);
  for (float& e : x) e = dist(rng);
  return x;
}

// |got - want| in units of the spacing of floats at want.
double ulps(float got, double want) {
  if (want == 0) return got == 0 ? 0 : INFINITY;
  int e = 0;
  std::frexp(want, &e);
  return std::abs(static_cast<double>(got) - want) / std::ldexp(1.0, std::max(e - 24, -149));
}

// Each exp within 2 ulp of exp(x - m) with x - m in f32, measured: at most 1.09 ulp on every target over
// these rows (arguments down to about -40); a sum of n exps within 2 ulp per term plus n roundings of
// the running sums.
TEST(RowKernels, MatchPlainLoopsOnEveryTarget) {
  for_each_simd_target([] {
    double worst_exp = 0;
    for (std::int64_t n : awkward_lengths())
      for (int offset : {0, 1, 3}) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << ", offset " << offset);
        const std::vector<float> buf = random_row(n, 7 + static_cast<std::uint32_t>(n), 4.0f);
        const std::vector<float> wbuf = random_row(n, 99, 1.0f);
        const float* x = buf.data() + offset;
        const float* w = wbuf.data() + offset;
        float m = -kInf;
        double s = 0, sum = 0, dot = 0, abs_dot = 0;
        for (std::int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
        for (std::int64_t j = 0; j < n; ++j) {
          // The kernels take exp of the f32 difference x - m (rounded: for x - m = -17 that rounding
          // alone moves exp by ~8 ulp), so the oracle does too.
          s += std::exp(static_cast<double>(x[j] - m));
          sum += x[j];
          dot += static_cast<double>(w[j]) * x[j];
          abs_dot += std::abs(static_cast<double>(w[j]) * x[j]);
        }
        ASSERT_EQ(row_max(x, n), m);
        const double sum_tol = (2.0 * static_cast<double>(n) + 2) * 0x1p-24 * s;
        EXPECT_NEAR(row_exp_sum(x, n, m), s, sum_tol);
        std::vector<float> e(x, x + n);
        EXPECT_NEAR(row_exp_store_sum(e.data(), n, m), s, sum_tol);
        std::vector<float> e2(x, x + n);
        row_exp(e2.data(), n, m);
        // The fused bf16 form: the same sum bit for bit, and each p[j] the bf16 of exp(x[j] - m)
        // rounded to nearest even (bf16::from_f32 of the in-place exp, which the loop above bounds).
        std::vector<bf16> p(static_cast<std::size_t>(n) + 1, bf16::from_bits(0x7777));
        const std::vector<float> x_before(x, x + n);
        const float s_bf16 = row_exp_sum_store_bf16(x, p.data(), n, m);
        std::vector<float> e3(x, x + n);
        EXPECT_EQ(s_bf16, row_exp_store_sum(e3.data(), n, m));
        EXPECT_EQ(p[static_cast<std::size_t>(n)].bits, 0x7777) << "wrote past the row";
        for (std::int64_t j = 0; j < n; ++j) {
          const double want = std::exp(static_cast<double>(x[j] - m));
          worst_exp = std::max(worst_exp, ulps(e[j], want));
          ASSERT_LE(ulps(e[j], want), 2.0) << "exp at " << j;
          ASSERT_EQ(e2[j], e[j]) << "row_exp and row_exp_store_sum differ at " << j;
          ASSERT_EQ(p[static_cast<std::size_t>(j)].bits, bf16::from_f32(e[j]).bits) << "bf16 exp at " << j;
          ASSERT_EQ(x[j], x_before[static_cast<std::size_t>(j)]) << "row_exp_sum_store_bf16 wrote x at " << j;
        }
        // Sums of n terms: n roundings of partial sums at most.
        double abs_sum = 0;
        for (std::int64_t j = 0; j < n; ++j) abs_sum += std::abs(x[j]);
        EXPECT_NEAR(row_dot(x, nullptr, n), sum, (n + 1) * 0x1p-24 * abs_sum);
        EXPECT_NEAR(row_dot(x, w, n), dot, (n + 1) * 0x1p-24 * abs_dot);
        std::vector<float> sc(x, x + n);
        row_scale(sc.data(), n, 0.375f);
        for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(sc[j], x[j] * 0.375f);
      }
    if (std::getenv("LMCORE_TEST_REPORT_ERRORS") != nullptr) std::printf("[error] exp: worst %.2f ulp\n", worst_exp);
  });
}

// The NaN rule of row_kernels.h: a NaN anywhere in a row (every position, body and tail) makes the max
// and every sum NaN; an exp stores NaN exactly where the NaN was and the true values elsewhere.
TEST(RowKernels, NanPropagatesFromEveryPosition) {
  for_each_simd_target([] {
    for (std::int64_t n : {1, 3, 4, 7, 8, 9, 16, 17, 33, 35}) {
      const std::vector<float> clean = random_row(n, 5, 2.0f);
      float m = -kInf;
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, clean[j]);
      for (std::int64_t at = 0; at < n; ++at) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << ", NaN at " << at);
        std::vector<float> x(clean.begin(), clean.begin() + n);
        x[at] = kNaN;
        EXPECT_TRUE(std::isnan(row_max(x.data(), n)));
        EXPECT_TRUE(std::isnan(row_exp_sum(x.data(), n, m)));
        EXPECT_TRUE(std::isnan(row_dot(x.data(), nullptr, n)));
        EXPECT_TRUE(std::isnan(row_dot(clean.data(), x.data(), n)));
        std::vector<float> e = x;
        EXPECT_TRUE(std::isnan(row_exp_store_sum(e.data(), n, m)));
        for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(std::isnan(e[j]), j == at) << j;
        std::vector<float> e2 = x;
        row_exp(e2.data(), n, m);
        for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(std::isnan(e2[j]), j == at) << j;
        std::vector<bf16> p(static_cast<std::size_t>(n));
        EXPECT_TRUE(std::isnan(row_exp_sum_store_bf16(x.data(), p.data(), n, m)));
        for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(std::isnan(p[static_cast<std::size_t>(j)].to_f32()), j == at) << j;
      }
      // A NaN max (what a caller folds in from another chunk) poisons the whole row.
      std::vector<float> e(clean.begin(), clean.begin() + n);
      EXPECT_TRUE(std::isnan(row_exp_store_sum(e.data(), n, kNaN)));
      for (float v : e) EXPECT_TRUE(std::isnan(v));
    }
    EXPECT_TRUE(std::isnan(max_nan(1.0f, kNaN)));
    EXPECT_TRUE(std::isnan(max_nan(kNaN, 1.0f)));
    EXPECT_EQ(max_nan(-kInf, 2.0f), 2.0f);
  });
}

// The exp itself (row_exp with m = 0) over its whole domain, every float step of 1/64 from -104 to
// 88.375: within 2 ulp of f64 exp wherever exp is a normal float; below FLT_MIN (arguments under
// -87.34) it gives 0 or a value within FLT_MIN of the true one, never garbage; the clamp edges -88.03
// (2^-127 built as 0) and 88.37 (the last argument below 2^128) included.
TEST(RowKernels, ExpAcrossItsDomain) {
  for_each_simd_target([] {
    std::vector<float> y;
    for (int i = -104 * 64; i <= 88 * 64 + 24; ++i) y.push_back(static_cast<float>(i) / 64.0f);
    for (float edge : {-88.0296936f, -87.9f, -87.3365f, 88.37f, 88.3762589f}) y.push_back(edge);
    std::vector<float> e = y;
    row_exp(e.data(), static_cast<std::int64_t>(e.size()), 0.0f);
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double want = std::exp(static_cast<double>(y[i]));
      if (want < std::numeric_limits<float>::min()) {
        ASSERT_GE(e[i], 0.0f) << "exp(" << y[i] << ")";
        ASSERT_LE(std::abs(e[i] - want), std::numeric_limits<float>::min()) << "exp(" << y[i] << ")";
        continue;
      }
      worst = std::max(worst, ulps(e[i], want));
      ASSERT_LE(ulps(e[i], want), 2.0) << "exp(" << y[i] << ") = " << e[i] << ", want " << want;
    }
    if (std::getenv("LMCORE_TEST_REPORT_ERRORS") != nullptr) std::printf("[error] exp domain: worst %.2f ulp\n", worst);
    std::vector<float> special = {kInf, -kInf, 0.0f, -0.0f, -1e30f, kNaN};
    row_exp(special.data(), static_cast<std::int64_t>(special.size()), 0.0f);
    EXPECT_EQ(special[0], kInf);
    EXPECT_EQ(special[1], 0.0f);
    EXPECT_EQ(special[2], 1.0f);
    EXPECT_EQ(special[3], 1.0f);
    EXPECT_EQ(special[4], 0.0f);
    EXPECT_TRUE(std::isnan(special[5]));
  });
}

// Every row kernel on rows that begin or end at an unmapped page: no load or store outside the row
// (a whole-vector load in a tail faults), and the same bits as on an ordinary vector.
TEST(RowKernels, StayInsideTheirRowsOnEveryTarget) {
  using testing::Fence;
  using testing::GuardedArray;
  for_each_simd_target([] {
    for (std::int64_t n : awkward_lengths())
      for (Fence fence : {Fence::before, Fence::after}) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << (fence == Fence::before ? ", fenced before" : ", fenced after"));
        std::vector<float> xv = random_row(n, 3, 3.0f), wv = random_row(n, 4, 1.0f);
        xv.resize(static_cast<std::size_t>(n)), wv.resize(static_cast<std::size_t>(n));
        GuardedArray<float> x(xv, fence), w(wv, fence);
        const float m = row_max(x.data(), n);
        EXPECT_EQ(m, row_max(xv.data(), n));
        EXPECT_EQ(row_exp_sum(x.data(), n, m), row_exp_sum(xv.data(), n, m));
        EXPECT_EQ(row_dot(x.data(), nullptr, n), row_dot(xv.data(), nullptr, n));
        EXPECT_EQ(row_dot(x.data(), w.data(), n), row_dot(xv.data(), wv.data(), n));
        std::vector<float> want = xv;
        const float want_sum = row_exp_store_sum(want.data(), n, m);
        GuardedArray<float> e(xv, fence);
        EXPECT_EQ(row_exp_store_sum(e.data(), n, m), want_sum);
        EXPECT_EQ(e.to_vector(), want);
        GuardedArray<float> e2(xv, fence);
        row_exp(e2.data(), n, m);
        EXPECT_EQ(e2.to_vector(), want);
        GuardedArray<bf16> p(n, fence);
        EXPECT_EQ(row_exp_sum_store_bf16(x.data(), p.data(), n, m), want_sum);
        for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(p.data()[j].bits, bf16::from_f32(want[j]).bits) << j;
        GuardedArray<float> sc(xv, fence);
        row_scale(sc.data(), n, 0.375f);
        for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(sc.data()[j], xv[j] * 0.375f) << j;
      }
  });
}

TEST(RowKernels, InfinitiesAndEmptyRows) {
  for_each_simd_target([] {
    EXPECT_EQ(row_max(nullptr, 0), -kInf);
    EXPECT_EQ(row_exp_sum(nullptr, 0, 0.0f), 0.0f);
    EXPECT_EQ(row_dot(nullptr, nullptr, 0), 0.0f);
    for (std::int64_t n : {1, 5, 16, 19}) {
      SCOPED_TRACE(::testing::Message() << "n = " << n);
      std::vector<float> masked(static_cast<std::size_t>(n), -kInf);
      EXPECT_EQ(row_max(masked.data(), n), -kInf);
      // Masked entries beside finite ones add exactly nothing and store 0.
      std::vector<float> x = masked;
      x[static_cast<std::size_t>(n / 2)] = 1.5f;
      EXPECT_EQ(row_max(x.data(), n), 1.5f);
      EXPECT_EQ(row_exp_store_sum(x.data(), n, 1.5f), 1.0f);
      for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(x[j], j == n / 2 ? 1.0f : 0.0f);
      // +inf is the max, and exp(inf - inf) is NaN, as in torch's softmax.
      std::vector<float> y(static_cast<std::size_t>(n), 0.0f);
      y[0] = kInf;
      EXPECT_EQ(row_max(y.data(), n), kInf);
      EXPECT_TRUE(std::isnan(row_exp_sum(y.data(), n, kInf)));
      // Arguments far below the max underflow to 0, never to garbage.
      std::vector<float> z(static_cast<std::size_t>(n), -300.0f);
      EXPECT_EQ(row_exp_sum(z.data(), n, 0.0f), 0.0f);
    }
  });
}

}  // namespace
}  // namespace lmcore::internal
