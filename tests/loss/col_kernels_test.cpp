// The column loops of the transposed bf16 tiles (src/loss/col_kernels.h) against plain f64 loops
// written here from the definition: a tile zT [rows, n] of vocabulary rows by token columns, with row
// counts around the block of kColBlock rows and column counts around the vector width; maxes that
// grow in later blocks (the running max and its rescaling), columns that start with blocks of -inf,
// class weights for the label-smoothing sums; the NaN rule (a NaN logit makes its column NaN and
// leaves the other columns' bits as they were); and the bf16 d_logits with each block's exps moved to
// the final max.
//
// Bounds (tests/common/bounds.h, each shown to reject a 1% error), measured with
// LMCORE_TEST_REPORT_ERRORS=1 build/release/tests/loss/test_loss --gtest_filter='LossColKernels*':
// the worst element uses 52% of its bound for the exps against the final max (0, 8: f32 eps of each
// element), 48% for the sums (0, 8), 62% for the weighted sums (4, 0 of the largest sum of |terms|),
// 98% for the bf16 d_logits (0, 0.51: rounding to nearest is at most half an ulp, 0.5 eps |x|, and
// the f32 error under it is ~1e-4 of that), 17% for d_bias (4, 0 of the sum of |terms|).
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lmcore/core/low_precision.h"
#include "src/loss/col_kernels.h"
#include "tests/common/bounds.h"
#include "tests/loss/loss_test_util.h"

namespace lmcore {
namespace {

using bounds::close_within;
using loss_detail::kColBlock;
using test::vec;

constexpr float kNinf = -std::numeric_limits<float>::infinity();

// zT [rows, n]: noise plus a ramp over the rows that rises in even columns (the max keeps growing from
// block to block) and falls in odd ones; column 1 is -inf in its first 70 rows (two blocks when rows
// allows) and in every 7th row after.
std::vector<float> make_tile(std::int64_t rows, std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> z(static_cast<std::size_t>(rows * n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      const float ramp = 6.0f * static_cast<float>(r) / static_cast<float>(rows);
      float x = noise(rng) + (j % 2 == 0 ? ramp : -ramp);
      if (j == 1 && n > 1 && (r < 70 || r % 7 == 0) && r + 1 < rows) x = kNinf;
      z[r * n + j] = x;
    }
  return z;
}

struct Exact {
  std::vector<double> m, s, wz;  // per column
};

Exact exact(const std::vector<float>& z, std::int64_t rows, std::int64_t n, const std::vector<float>& w) {
  Exact e{std::vector<double>(n, -INFINITY), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t r = 0; r < rows; ++r) e.m[j] = std::max<double>(e.m[j], z[r * n + j]);
    for (std::int64_t r = 0; r < rows; ++r) {
      e.s[j] += std::exp(double(z[r * n + j]) - e.m[j]);
      e.wz[j] += double(w[r]) * z[r * n + j];  // -inf with a -inf logit, as the kernel's
    }
  }
  return e;
}

struct Online {
  std::vector<float> e, m, s, wz, block_m;
};

Online online(std::vector<float> z, std::int64_t rows, std::int64_t n, const std::vector<float>* w) {
  Online o{std::move(z), std::vector<float>(n, kNinf), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f),
           std::vector<float>(static_cast<std::size_t>(((rows + kColBlock - 1) / kColBlock) * n))};
  loss_detail::col_exp_store_sum_online_f32(o.e.data(), rows, n, o.m.data(), o.s.data(), w ? w->data() : nullptr,
                                            w ? o.wz.data() : nullptr, o.block_m.data());
  return o;
}

TEST(LossColKernels, OnlineExpSumsMatchTheDefinition) {
  for (std::int64_t rows : {1, 2, 63, 64, 65, 129, 300})
    for (std::int64_t n : {1, 2, 15, 16, 17, 33, 100}) {
      const std::string name = "rows " + std::to_string(rows) + " n " + std::to_string(n) + " ";
      SCOPED_TRACE(name);
      const std::vector<float> z = make_tile(rows, n, static_cast<std::uint32_t>(rows * 131 + n));
      std::vector<float> w(static_cast<std::size_t>(rows));
      std::mt19937 rng(7);
      for (float& x : w) x = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng);
      const Exact want = exact(z, rows, n, w);
      const Online got = online(z, rows, n, &w);
      std::vector<double> m(n), s(n), e, e_want, wz(n), wz_terms(n, 0.0);
      for (std::int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(double(got.m[j]), want.m[j]) << name << "column " << j;  // a max is exact
        s[j] = got.s[j];
        wz[j] = got.wz[j];
        for (std::int64_t r = 0; r < rows; ++r) {
          const double f = std::exp(double(got.block_m[(r / kColBlock) * n + j]) - double(got.m[j]));
          e.push_back(got.e[r * n + j] * f);
          e_want.push_back(std::exp(double(z[r * n + j]) - want.m[j]));
          if (std::isfinite(z[r * n + j])) wz_terms[j] += std::abs(double(w[r]) * z[r * n + j]);
        }
      }
      EXPECT_TRUE(close_within(name + "exp", vec(e), vec(e_want), DType::f32, {0, 8}));
      EXPECT_TRUE(close_within(name + "sum", vec(s), vec(want.s), DType::f32, {0, 8}));
      double terms = 0;
      for (double t : wz_terms) terms = std::max(terms, t);
      EXPECT_TRUE(close_within(name + "weighted sum", vec(wz), vec(want.wz), DType::f32, {4, 0}, terms));
    }
}

TEST(LossColKernels, NanLogitMakesItsColumnNanOnly) {
  const std::int64_t rows = 150, n = 20;
  const std::vector<float> z = make_tile(rows, n, 3);
  std::vector<float> bad = z;
  bad[100 * n + 6] = NAN;  // third block, after the column's max may have grown
  const Online a = online(z, rows, n, nullptr), b = online(bad, rows, n, nullptr);
  for (std::int64_t j = 0; j < n; ++j) {
    EXPECT_EQ(std::isnan(b.m[j]), j == 6) << j;
    EXPECT_EQ(std::isnan(b.s[j]), j == 6) << j;
    if (j == 6) continue;
    EXPECT_EQ(a.m[j], b.m[j]) << j;
    EXPECT_EQ(a.s[j], b.s[j]) << j;
    for (std::int64_t r = 0; r < rows; ++r) EXPECT_EQ(a.e[r * n + j], b.e[r * n + j]) << r << " " << j;
  }
}

// d[r, j] = keep ? (p[r, j] * a[j] - bw[j] * w[r]) - (row0 + r == target[j] ? bt[j] : 0) : 0, with p the
// softmax of column j, from the online exps (block_m) and also written over them in place.
TEST(LossColKernels, GradientFromBlockExpsMatchesTheDefinition) {
  for (std::int64_t rows : {1, 64, 65, 200})
    for (std::int64_t n : {1, 16, 17, 40})
      for (bool in_place : {false, true}) {
        const std::string name = "rows " + std::to_string(rows) + " n " + std::to_string(n) +
                                 (in_place ? " in place " : " ");
        SCOPED_TRACE(name);
        const std::vector<float> z = make_tile(rows, n, static_cast<std::uint32_t>(rows + 7 * n));
        std::vector<float> w(static_cast<std::size_t>(rows));
        std::mt19937 rng(11);
        for (float& x : w) x = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng);
        Online o = online(z, rows, n, nullptr);
        const Exact want_stats = exact(z, rows, n, w);
        const std::int64_t row0 = 5;  // a slice that starts at vocabulary row 5
        std::vector<float> a(n), bw(n), bt(n), keep(n), scale(n);
        std::vector<std::int32_t> target(n);
        for (std::int64_t j = 0; j < n; ++j) {
          a[j] = 0.5f + 0.01f * j;
          bw[j] = 0.002f * (j % 3);
          bt[j] = 0.7f;
          keep[j] = j % 5 == 4 ? 0.0f : 1.0f;  // every 5th token ignored
          target[j] = static_cast<std::int32_t>(row0 + (j * 37) % rows);
          scale[j] = a[j] / o.s[j];
        }
        if (n > 3) target[3] = -1;  // no target row in this slice
        loss_detail::ColGrad g;
        g.scale = scale.data();
        g.bw = bw.data();
        g.w = w.data();
        g.bt = bt.data();
        g.target = target.data();
        g.keep = keep.data();
        g.block_m = o.block_m.data();
        g.m = o.m.data();
        std::vector<bf16> separate(static_cast<std::size_t>(rows * n));
        bf16* out = in_place ? reinterpret_cast<bf16*>(o.e.data()) : separate.data();
        std::vector<float> db(static_cast<std::size_t>(rows), 0.25f);
        loss_detail::col_grad_to_bf16(o.e.data(), rows, n, row0, g, out, db.data());
        std::vector<double> got, want, db_want(rows, 0.25), db_got(db.begin(), db.end());
        double db_terms = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          double terms = 0.25;
          for (std::int64_t j = 0; j < n; ++j) {
            const double p = std::exp(double(z[r * n + j]) - want_stats.m[j]) / want_stats.s[j];
            double d = p * a[j] - double(bw[j]) * w[r] - (row0 + r == target[j] ? bt[j] : 0.0);
            if (keep[j] == 0.0f) d = 0.0;
            got.push_back(out[r * n + j].to_f32());
            want.push_back(d);
            db_want[r] += d;
            terms += std::abs(d);
          }
          db_terms = std::max(db_terms, terms);
        }
        EXPECT_TRUE(close_within(name + "d_logits", vec(got), vec(want), DType::bf16, {0, 0.51}));
        EXPECT_TRUE(close_within(name + "d_bias", vec(db_got), vec(db_want), DType::f32, {4, 0}, db_terms));
      }
}

}  // namespace
}  // namespace lmcore
