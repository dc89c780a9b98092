// The f32 vector row loops (src/loss/row_kernels.h) against the scalar loops of loss_common.h, over
// lengths around the vector width (1, N-1, N, N+1, 8N+2 for every N up to 16 lanes), misaligned
// starts, class weights, and NaN / -inf logits.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "src/loss/loss_common.h"
#include "src/loss/row_kernels.h"

namespace lmcore {
namespace {

using loss_detail::LossSetup;
using loss_detail::RowGrad;
using loss_detail::RowStats;

std::vector<std::int64_t> awkward_lengths() {
  std::vector<std::int64_t> n = {0, 1, 2, 3, 129, 1000};
  for (std::int64_t lanes : {4, 8, 16})
    for (std::int64_t k : {lanes - 1, lanes, lanes + 1, 2 * lanes + 1, 8 * lanes + 2}) n.push_back(k);
  return n;
}

std::vector<float> random_logits(std::int64_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(static_cast<std::size_t>(n) + 1);  // + 1: room for a misaligned start
  for (float& e : x) e = dist(rng);
  return x;
}

// Relative closeness for sums of n positive-ish terms: a few ulp per term at most.
void expect_close(float got, float want, std::int64_t n, const char* what) {
  const float tol = 4e-7f * static_cast<float>(n + 4) * std::max(1.0f, std::abs(want));
  EXPECT_NEAR(got, want, tol) << what << " (n = " << n << ")";
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

TEST(LossRowKernels, MaxAndSumsMatchScalarLoops) {
  for (std::int64_t n : awkward_lengths())
    for (int offset : {0, 1}) {
      const std::vector<float> buf = random_logits(n, 7 + static_cast<std::uint32_t>(n), 3.0f);
      const float* x = buf.data() + offset;
      const std::vector<float> wbuf = random_logits(n, 99, 1.0f);
      float m = -std::numeric_limits<float>::infinity();
      double s = 0, sw = 0, sx = 0;
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
      for (std::int64_t j = 0; j < n; ++j) {
        s += std::exp(static_cast<double>(x[j]) - m);
        sw += static_cast<double>(wbuf[j]) * x[j];
        sx += x[j];
      }
      EXPECT_EQ(loss_detail::row_max_f32(x, n), m) << "n = " << n;
      expect_close(loss_detail::row_exp_sum_f32(x, n, n ? m : 0.0f), static_cast<float>(s), n, "exp sum");
      expect_close(loss_detail::row_weighted_sum_f32(x, nullptr, n), static_cast<float>(sx), n, "sum");
      expect_close(loss_detail::row_weighted_sum_f32(x, wbuf.data(), n), static_cast<float>(sw), n, "weighted sum");
      std::vector<float> stored(x, x + n);
      expect_close(loss_detail::row_exp_store_sum_f32(stored.data(), n, n ? m : 0.0f), static_cast<float>(s), n,
                   "stored exp sum");
      for (std::int64_t j = 0; j < n; ++j) EXPECT_NEAR(stored[j], std::exp(x[j] - m), 2e-7f) << "exp[" << j << "]";
    }
}

TEST(LossRowKernels, MaxPropagatesNanAndIgnoresInfinitePadding) {
  for (std::int64_t n : awkward_lengths()) {
    if (n == 0) continue;
    std::vector<float> x = random_logits(n, 3, 1.0f);
    x[static_cast<std::size_t>(n - 1)] = -std::numeric_limits<float>::infinity();
    EXPECT_FALSE(std::isnan(loss_detail::row_max_f32(x.data(), n))) << "n = " << n;
    x[static_cast<std::size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(loss_detail::row_max_f32(x.data(), n))) << "n = " << n;
  }
}

// fold_chunk and grad_chunk (vector for f32) against fold_chunk_scalar and grad_chunk_scalar, with and
// without label smoothing and class weights, over chunks that hold the target or not.
TEST(LossRowKernels, FoldAndGradChunksMatchScalarReference) {
  for (std::int64_t n : awkward_lengths()) {
    if (n == 0) continue;
    const std::vector<float> z = random_logits(n, 11, 4.0f);
    const std::vector<float> w = random_logits(n, 12, 0.2f);
    std::vector<float> cw(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) cw[j] = 1.0f + w[j];
    for (const float* class_weight : {static_cast<const float*>(nullptr), static_cast<const float*>(cw.data())})
      for (float eps : {0.0f, 0.1f})
        for (std::int64_t t : {std::int64_t{0}, n - 1, std::int64_t{-100}}) {
          SCOPED_TRACE(::testing::Message() << "n = " << n << ", weights " << (class_weight != nullptr)
                                            << ", eps " << eps << ", target " << t);
          const LossSetup<float> S = setup(n, &t, class_weight, eps);
          RowStats<float> a, b;
          loss_detail::fold_chunk(S, 0, a, z.data(), 0, n);
          loss_detail::fold_chunk_scalar(S, 0, b, z.data(), 0, n);
          EXPECT_EQ(a.m, b.m);
          expect_close(a.s, b.s, n, "s");
          EXPECT_EQ(a.zt, b.zt);
          expect_close(a.wz, b.wz, n, "wz");
          const float lse = b.lse();
          const RowGrad<float> r = loss_detail::row_grad(S, 0, lse, 0.7f);
          std::vector<float> ga(z), gb(z);
          loss_detail::grad_chunk(S, 0, r, lse, ga.data(), 0, n);
          loss_detail::grad_chunk_scalar(S, 0, r, lse, gb.data(), 0, n);
          for (std::int64_t j = 0; j < n; ++j) EXPECT_NEAR(ga[j], gb[j], 1e-6f) << "d_logit[" << j << "]";
          // The one-exp row of the fused single-chunk path gives the same loss terms and gradient.
          {
            std::vector<float> gc(z.begin(), z.begin() + n);
            float lse_c = 0, ce_c = 0, zl_c = 0, ce_b = 0, zl_b = 0;
            loss_detail::loss_and_grad_row_f32(S, 0, gc.data(), 0.7f, lse_c, ce_c, zl_c);
            loss_detail::row_loss(S, 0, lse, b.zt, b.wz, ce_b, zl_b);
            EXPECT_NEAR(lse_c, lse, 1e-6f * (1 + std::abs(lse)));
            EXPECT_NEAR(ce_c, ce_b, 1e-5f * (1 + std::abs(ce_b)));
            EXPECT_NEAR(zl_c, zl_b, 1e-5f * (1 + std::abs(zl_b)));
            for (std::int64_t j = 0; j < n; ++j) EXPECT_NEAR(gc[j], gb[j], 1e-6f) << "one-exp d_logit[" << j << "]";
          }
        }
  }
}

}  // namespace
}  // namespace lmcore
