// The f32 per-token pieces of the losses (src/loss/loss_common.h over the row kernels: fold_chunk,
// grad_chunk, the one-exp loss_and_grad_row_f32, and the loss-only vector loops of src/loss/row_kernels.h)
// against plain f64 loops written here from the definition (not the scalar helpers of loss_common.h,
// which the f64 path runs), over lengths around the vector width, chunks that hold the target or not,
// class weights and label smoothing; and the NaN rule of lmcore/core/internal/row_kernels.h through
// them: a NaN logit makes its token's statistics and every entry of its gradient NaN.
//
// Bounds (tests/common/bounds.h, each shown to reject a 1% error), measured with
// LMCORE_TEST_REPORT_ERRORS=1 build/release/tests/loss/test_loss --gtest_filter='LossRowKernels*', in
// f32 eps times the size of the terms (max|want|, or the sum of |terms| where they cancel): lse 0.40,
// wz 0.49, ce 0.76, zl 1.0 (4, 0); d_logits 2.4, the one-exp row 1.7 (8, 0). Before: the vector code
// against the scalar helpers of loss_common.h at 4e-7 (n + 4) relative and 1e-6 absolute.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/loss/loss_common.h"
#include "src/loss/row_kernels.h"
#include "tests/common/bounds.h"
#include "tests/loss/loss_test_util.h"

namespace lmcore {
namespace {

using bounds::close_within;
using loss_detail::LossSetup;
using loss_detail::RowGrad;
using loss_detail::RowStats;
using test::vec;

constexpr bounds::Bound kStats{4, 0}, kGrad{8, 0};

std::vector<std::int64_t> awkward_lengths() {
  std::vector<std::int64_t> n = {1, 2, 3, 129, 1000};
  for (std::int64_t lanes : {4, 8, 16})
    for (std::int64_t k : {lanes - 1, lanes, lanes + 1, 2 * lanes + 1, 8 * lanes + 2}) n.push_back(k);
  return n;
}

std::vector<float> random_values(std::int64_t n, std::uint32_t seed, float mean, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, scale);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& e : x) e = dist(rng);
  return x;
}

LossSetup<float> setup(std::int64_t v, const std::int64_t* target, const float* class_weight, float eps) {
  LossSetup<float> S;
  S.n = 1;
  S.v = v;
  S.target = target;
  S.class_weight = class_weight;
  S.eps = eps;
  S.z_scale = 1e-3f;
  S.weight_sum = static_cast<float>(v);
  if (class_weight) {
    S.weight_sum = 0;
    for (std::int64_t j = 0; j < v; ++j) S.weight_sum += class_weight[j];
  }
  return S;
}

// One token from the definition (tests/loss/naive_reference.h has the formulas), f64.
struct Token {
  double lse, zt, wz, ce, zl;
  double wz_terms;           // sum_j |w_j z_j|: the size of what wz sums
  double ce_terms = 0;       // the size of the terms of ce (lse - z_t cancels for a confident token)
  std::vector<double> grad;  // d (g (ce + zl)) / d z
  double grad_terms = 0;     // max_j of the sum of |terms| of grad[j] (p_t - 1 cancels where p_t ~ 1)
};

Token plain_token(const std::vector<float>& z, std::int64_t t, const float* w, double eps, double zs, double g) {
  const std::size_t n = z.size();
  double m = -INFINITY, s = 0, wz = 0, W = 0, wz_terms = 0;
  for (float x : z) m = std::max(m, static_cast<double>(x));
  for (float x : z) s += std::exp(x - m);
  for (std::size_t j = 0; j < n; ++j) {
    const double wj = w ? w[j] : 1.0;
    wz += wj * z[j];
    wz_terms += std::abs(wj * z[j]);
    W += wj;
  }
  Token r;
  r.lse = m + std::log(s);
  r.wz = wz;
  r.wz_terms = wz_terms;
  r.zt = t >= 0 ? z[static_cast<std::size_t>(t)] : 0.0;
  if (t < 0) {
    r.ce = r.zl = 0;
    r.grad.assign(n, 0.0);
    return r;
  }
  const double wt = w ? w[t] : 1.0, V = static_cast<double>(n);
  r.ce = (1 - eps) * wt * (r.lse - r.zt) + eps / V * (W * r.lse - wz);
  r.zl = zs * r.lse * r.lse;
  r.ce_terms = (1 - eps) * wt * (std::abs(r.lse) + std::abs(r.zt)) + eps / V * (W * std::abs(r.lse) + wz_terms);
  for (std::size_t j = 0; j < n; ++j) {
    const double p = std::exp(z[j] - r.lse), wj = w ? w[j] : 1.0;
    const double onehot = static_cast<std::int64_t>(j) == t ? 1.0 : 0.0;
    r.grad.push_back(g * ((1 - eps) * wt * (p - onehot) + eps / V * (W * p - wj) + 2 * zs * r.lse * p));
    r.grad_terms = std::max(r.grad_terms, std::abs(g) * ((1 - eps) * wt * (p + onehot) + eps / V * (W * p + wj) +
                                                         2 * zs * std::abs(r.lse) * p));
  }
  return r;
}

Tensor scalar(double x) { return Tensor::full({}, x, DType::f64); }
Tensor vec(const std::vector<float>& x) { return Tensor::from_vector(x, {static_cast<std::int64_t>(x.size())}); }

// fold_chunk over the whole row, and over it in three chunks (the running max moves), grad_chunk and
// the one-exp row, with and without label smoothing and class weights, target first, last or ignored.
TEST(LossRowKernels, TokenPiecesMatchTheDefinition) {
  for (std::int64_t n : awkward_lengths()) {
    // Logits rising along the row: a later chunk holds a larger max, so the fold rescales its sum.
    std::vector<float> z = random_values(n, 11, 0.0f, 3.0f);
    for (std::int64_t j = 0; j < n; ++j) z[j] += 4.0f * static_cast<float>(j) / static_cast<float>(n);
    std::vector<float> cw = random_values(n, 12, 1.0f, 0.2f);
    for (const float* class_weight : {static_cast<const float*>(nullptr), static_cast<const float*>(cw.data())})
      for (float eps : {0.0f, 0.1f})
        for (std::int64_t t : {std::int64_t{0}, n - 1, std::int64_t{-100}}) {
          const std::string name = "n " + std::to_string(n) + (class_weight ? " weights" : "") + " eps " +
                                   std::to_string(eps) + " target " + std::to_string(t) + ": ";
          SCOPED_TRACE(name);
          const LossSetup<float> S = setup(n, &t, class_weight, eps);
          const Token want = plain_token(z, t, class_weight, eps, S.z_scale, 0.7);
          RowStats<float> whole, parts;
          loss_detail::fold_chunk(S, 0, whole, z.data(), 0, n);
          const std::int64_t c1 = n / 3, c2 = 2 * n / 3;
          for (auto [lo, hi] : {std::pair{std::int64_t{0}, c1}, std::pair{c1, c2}, std::pair{c2, n}})
            loss_detail::fold_chunk(S, 0, parts, z.data() + lo, lo, hi - lo);
          for (const RowStats<float>* st : {&whole, &parts}) {
            const std::string which = st == &whole ? "one chunk " : "three chunks ";
            EXPECT_TRUE(close_within(name + which + "lse", scalar(st->lse()), scalar(want.lse), DType::f32, kStats));
            if (t >= 0) {
              EXPECT_EQ(st->zt, want.zt);
            }
            if (eps > 0) {
              EXPECT_TRUE(close_within(name + which + "wz", scalar(st->wz), scalar(want.wz), DType::f32, kStats,
                                       want.wz_terms));
            }
          }
          float ce = 0, zl = 0;
          loss_detail::row_loss(S, 0, whole.lse(), whole.zt, whole.wz, ce, zl);
          EXPECT_TRUE(close_within(name + "ce", scalar(ce), scalar(want.ce), DType::f32, kStats, want.ce_terms));
          EXPECT_TRUE(close_within(name + "zl", scalar(zl), scalar(want.zl), DType::f32, kStats));
          const float lse = whole.lse();
          const RowGrad<float> r = loss_detail::row_grad(S, 0, lse, 0.7f);
          std::vector<float> ga(z);
          loss_detail::grad_chunk(S, 0, r, lse, ga.data(), 0, n);
          if (t >= 0) {
            EXPECT_TRUE(close_within(name + "d_logits", vec(ga), vec(want.grad), DType::f32, kGrad, want.grad_terms));
          } else {
            for (float x : ga) EXPECT_EQ(x, 0.0f);
          }
          // The one-exp row of the fused single-chunk path.
          std::vector<float> gc(z);
          float lse_c = 0, ce_c = 0, zl_c = 0;
          loss_detail::loss_and_grad_row_f32(S, 0, gc.data(), 0.7f, lse_c, ce_c, zl_c);
          EXPECT_TRUE(close_within(name + "one-exp lse", scalar(lse_c), scalar(want.lse), DType::f32, kStats));
          EXPECT_TRUE(close_within(name + "one-exp ce", scalar(ce_c), scalar(want.ce), DType::f32, kStats, want.ce_terms));
          if (t >= 0) {
            EXPECT_TRUE(close_within(name + "one-exp d_logits", vec(gc), vec(want.grad), DType::f32, kGrad, want.grad_terms));
          } else {
            for (float x : gc) EXPECT_EQ(x, 0.0f);
          }
        }
  }
}

// The NaN rule through a token: a NaN logit anywhere (first chunk, last chunk, the tail of a vector)
// makes lse, the loss terms and every entry of d_logits NaN, in the chunked and the one-exp paths.
TEST(LossRowKernels, NanLogitMakesItsTokenNan) {
  for (std::int64_t n : {1, 7, 16, 17, 35}) {
    const std::vector<float> clean = random_values(n, 21, 0.0f, 2.0f);
    for (std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {
      SCOPED_TRACE(::testing::Message() << "n = " << n << ", NaN at " << at);
      std::vector<float> z = clean;
      z[static_cast<std::size_t>(at)] = std::numeric_limits<float>::quiet_NaN();
      std::int64_t t = 0;
      const LossSetup<float> S = setup(n, &t, nullptr, 0.1f);
      RowStats<float> st;
      const std::int64_t c = (n + 1) / 2;
      loss_detail::fold_chunk(S, 0, st, z.data(), 0, c);
      loss_detail::fold_chunk(S, 0, st, z.data() + c, c, n - c);
      EXPECT_TRUE(std::isnan(st.lse()));
      float ce = 0, zl = 0;
      loss_detail::row_loss(S, 0, st.lse(), st.zt, st.wz, ce, zl);
      EXPECT_TRUE(std::isnan(ce) && std::isnan(zl));
      std::vector<float> g = z;
      loss_detail::grad_chunk(S, 0, loss_detail::row_grad(S, 0, st.lse(), 1.0f), st.lse(), g.data(), 0, n);
      for (float x : g) EXPECT_TRUE(std::isnan(x));
      std::vector<float> g1 = z;
      float lse = 0;
      loss_detail::loss_and_grad_row_f32(S, 0, g1.data(), 1.0f, lse, ce, zl);
      EXPECT_TRUE(std::isnan(lse) && std::isnan(ce));
      for (float x : g1) EXPECT_TRUE(std::isnan(x));
    }
  }
}

}  // namespace
}  // namespace lmcore
