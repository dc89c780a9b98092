// AdamW against a plain double-precision twin of torch.optim.AdamW's update, the schedules' values, and
// gradient clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lmcore/model/parameters.h"
#include "lmcore/train/adamw.h"
#include "lmcore/train/lr_schedule.h"
#include "src/train/adamw_kernel.h"
#include "tests/common/simd_targets.h"
#include "tests/train/train_test_util.h"

namespace lmcore::train {
namespace {

TEST(AdamW, MatchesTheDoublePrecisionUpdateAndSkipsDecayOnNormsAndEmbeddings) {
  const model::ModelConfig c = testing::tiny_config();
  const model::ParameterLayout L(c);
  const std::int64_t n = L.size();
  std::vector<float> p(n), g(n);
  std::vector<double> pd(n), m(n, 0.0), v(n, 0.0);
  for (std::int64_t i = 0; i < n; ++i) pd[i] = p[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(L, o);
  std::vector<bool> decay(n, false);
  for (const auto& s : L.params())
    for (std::int64_t i = 0; i < s.numel; ++i) decay[s.offset + i] = s.weight_decay;
  for (int step = 1; step <= 5; ++step) {
    for (std::int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(std::cos(0.11 * i * step) * 0.01 * step);
    const double lr = 1e-2 * step;
    opt.step(p.data(), g.data(), lr);
    const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
    for (std::int64_t i = 0; i < n; ++i) {
      if (decay[i]) pd[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * double(g[i]) * g[i];
      pd[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
    }
    // An update moves each parameter by at most ~lr: f32 rounding of p and of the update, a few eps.
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(p[i] - pd[i]) / (std::fabs(pd[i]) + lr));
    EXPECT_LE(worst, 8 * step * 1.2e-7) << "step " << step;
  }
  EXPECT_EQ(opt.steps(), 5);
  // Norm weights never decay: with a zero gradient they keep their value exactly.
  AdamW opt2(L, o);
  std::vector<float> q(n, 1.0f), zero(n, 0.0f);
  opt2.step(q.data(), zero.data(), 0.5);
  const auto& norm = L.at("model.layers.0.input_layernorm.weight");
  const auto& w = L.at("model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(q[norm.offset], 1.0f);
  EXPECT_EQ(q[L.at("model.embed_tokens.weight").offset], 1.0f);
  EXPECT_FLOAT_EQ(q[w.offset], 1.0f - 0.5f * 0.1f);
}

// The vector kernel for every length up to a few vectors (whole vectors, a masked tail, both) with and
// without decay: each element against the double-precision update from the same f32 inputs, and every
// split of the range into two calls gives the bits of one call (the tail lanes are not a second path).
TEST(AdamW, KernelMatchesTheDoublePrecisionUpdateForEveryLengthAndSplit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  detail::AdamWScalars s{};
  s.decay_scale = 1.0f - 3e-3f * 0.1f;
  s.beta1 = 0.9f, s.one_minus_beta1 = 0.1f, s.beta2 = 0.95f, s.one_minus_beta2 = 0.05f;
  s.step_size = 3e-3f / 0.19f, s.bias_correction2_sqrt = std::sqrt(0.0975f), s.eps = 1e-8f;
  constexpr double kEps32 = 5.96e-8;  // f32 unit roundoff
  for (const bool decay : {false, true}) {
    for (std::int64_t n = 0; n <= 67; ++n) {
      std::vector<float> p(n), g(n), m(n), v(n);
      for (std::int64_t i = 0; i < n; ++i) {
        p[i] = u(rng), g[i] = 0.1f * u(rng), m[i] = 0.01f * u(rng), v[i] = 1e-4f * std::fabs(u(rng));
      }
      std::vector<float> P = p, M = m, V = v;
      detail::adamw_update(P.data(), g.data(), M.data(), V.data(), n, s, decay);
      for (std::int64_t i = 0; i < n; ++i) {
        const double pd = decay ? double(p[i]) * s.decay_scale : p[i];
        const double md = double(s.beta1) * m[i] + double(s.one_minus_beta1) * g[i];
        const double vd = double(s.beta2) * v[i] + double(s.one_minus_beta2) * g[i] * g[i];
        const double denom = std::sqrt(vd) / s.bias_correction2_sqrt + s.eps, upd = s.step_size * md / denom;
        // m's rounding is absolute (its two terms may cancel); the update carries it over denom.
        const double m_err = 3 * kEps32 * (s.beta1 * std::fabs(m[i]) + s.one_minus_beta1 * std::fabs(g[i]));
        ASSERT_LE(std::fabs(M[i] - md), m_err) << "n " << n << " i " << i;
        ASSERT_LE(std::fabs(V[i] - vd), 4 * kEps32 * vd) << "n " << n << " i " << i;
        ASSERT_LE(std::fabs(P[i] - (pd - upd)),
                  3 * kEps32 * std::fabs(pd) + 8 * kEps32 * std::fabs(upd) + s.step_size * m_err / denom)
            << "n " << n << " i " << i << " decay " << decay;
      }
      for (std::int64_t k = 0; k <= n && n > 0; ++k) {  // (memcmp wants real pointers)
        std::vector<float> P2 = p, M2 = m, V2 = v;
        detail::adamw_update(P2.data(), g.data(), M2.data(), V2.data(), k, s, decay);
        detail::adamw_update(P2.data() + k, g.data() + k, M2.data() + k, V2.data() + k, n - k, s, decay);
        ASSERT_EQ(std::memcmp(P2.data(), P.data(), sizeof(float) * n), 0) << "n " << n << " split " << k;
        ASSERT_EQ(std::memcmp(M2.data(), M.data(), sizeof(float) * n), 0) << "n " << n << " split " << k;
        ASSERT_EQ(std::memcmp(V2.data(), V.data(), sizeof(float) * n), 0) << "n " << n << " split " << k;
      }
    }
  }
}

// Every SIMD target this CPU runs (AVX-512, AVX2, SSE4, ... as Highway dispatches), on arrays that end
// or begin at an unmapped page: the tail must not touch memory past the end (Highway's MaskedLoad
// reads whole vectors on the SSE targets, which faulted here), and every target gives the same bits.
TEST(AdamW, KernelStaysInsideItsArraysOnEveryTargetAndEveryTargetAgrees) {
  detail::AdamWScalars s{};
  s.decay_scale = 1.0f - 3e-3f * 0.1f;
  s.beta1 = 0.9f, s.one_minus_beta1 = 0.1f, s.beta2 = 0.95f, s.one_minus_beta2 = 0.05f;
  s.step_size = 3e-3f / 0.19f, s.bias_correction2_sqrt = std::sqrt(0.0975f), s.eps = 1e-8f;
  constexpr std::int64_t kMaxN = 35;  // two 16-lane vectors and a tail
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> p(kMaxN), g(kMaxN), m(kMaxN), v(kMaxN);
  for (std::int64_t i = 0; i < kMaxN; ++i)
    p[i] = u(rng), g[i] = 0.1f * u(rng), m[i] = 0.01f * u(rng), v[i] = 1e-4f * std::fabs(u(rng));
  // The best target's results, for every length.
  std::vector<std::vector<float>> want(kMaxN + 1);
  for (std::int64_t n = 1; n <= kMaxN; ++n) {
    std::vector<float> P(p.begin(), p.begin() + n), M(m.begin(), m.begin() + n), V(v.begin(), v.begin() + n);
    detail::adamw_update(P.data(), g.data(), M.data(), V.data(), n, s, true);
    want[n] = P;
    want[n].insert(want[n].end(), M.begin(), M.end());
    want[n].insert(want[n].end(), V.begin(), V.end());
  }
  lmcore::testing::for_each_simd_target([&] {
    for (std::int64_t n = 1; n <= kMaxN; ++n)
      for (const lmcore::testing::Fence fence : {lmcore::testing::Fence::before, lmcore::testing::Fence::after}) {
        const auto first_n = [n](const std::vector<float>& a) { return std::vector<float>(a.begin(), a.begin() + n); };
        lmcore::testing::GuardedArray<float> P(first_n(p), fence), G(first_n(g), fence), M(first_n(m), fence),
            V(first_n(v), fence);
        detail::adamw_update(P.data(), G.data(), M.data(), V.data(), n, s, true);
        std::vector<float> got(P.data(), P.data() + n);
        got.insert(got.end(), M.data(), M.data() + n);
        got.insert(got.end(), V.data(), V.data() + n);
        EXPECT_EQ(std::memcmp(got.data(), want[n].data(), got.size() * sizeof(float)), 0) << "n " << n;
      }
  });
}

TEST(AdamW, ASliceHoldsOnlyItsStateAndAgreesWithTheWhole) {
  const model::ModelConfig c = testing::tiny_config();
  const model::ParameterLayout L(c);
  const std::int64_t n = L.size(), lo = n / 3, hi = 2 * n / 3;
  std::vector<float> a(n), b(n), g(n);
  for (std::int64_t i = 0; i < n; ++i) a[i] = b[i] = 0.01f * static_cast<float>(i % 97), g[i] = 0.001f * (i % 13);
  AdamW whole(L, {}), part(L, {}, lo, hi);
  EXPECT_EQ(part.size(), hi - lo);
  EXPECT_EQ(part.exp_avg().numel(), hi - lo);
  whole.step(a.data(), g.data(), 1e-3);
  part.step(b.data() + lo, g.data() + lo, 1e-3);
  for (std::int64_t i = lo; i < hi; ++i) ASSERT_EQ(a[i], b[i]) << i;
  EXPECT_NE(testing::error_of([&] { AdamW bad(L, {}, 5, n + 1); }).find("outside the"), std::string::npos);
}

TEST(LrSchedule, WarmupCosineAndWarmupStableDecay) {
  LrSchedule s{Schedule::cosine, 1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // half way: (1 + 0.1) / 2
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  for (std::int64_t i = 11; i < 110; ++i) EXPECT_LT(s.at(i), s.at(i - 1));
  LrSchedule w{Schedule::wsd, 1.0, 10, 100, 0.0, 0.2};
  EXPECT_DOUBLE_EQ(w.at(50), 1.0);
  EXPECT_DOUBLE_EQ(w.at(79), 1.0);
  EXPECT_LT(w.at(80), 1.0);
  EXPECT_NEAR(w.at(99), 0.0, 1e-12);
  EXPECT_EQ(schedule_from_name("wsd"), Schedule::wsd);
  EXPECT_NE(testing::error_of([] { schedule_from_name("linear"); }).find("'linear' is not one of"), std::string::npos);
  LrSchedule bad{Schedule::cosine, -1.0};
  EXPECT_NE(testing::error_of([&] { bad.validate(); }).find("learning rate must be > 0"), std::string::npos);
}

TEST(GradClip, TorchRule) {
  std::vector<float> g = {3.0f, 4.0f};
  const double norm = std::sqrt(grad_norm_squared(g.data(), 2));
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_NEAR(clip_grad_norm(g.data(), 2, norm, 1.0), 1.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_NEAR(g[0], 3.0 / 5.0, 1e-6);
  std::vector<float> small = {0.1f};
  EXPECT_EQ(clip_grad_norm(small.data(), 1, 0.1, 1.0), 1.0);
  EXPECT_EQ(small[0], 0.1f);
}

// The squared norm against a long double sum, for lengths around the vector and unroll widths and across
// the 64K chunks: the f64 sum of f32 squares is exact to a few f64 roundings per term.
TEST(GradNormSquared, MatchesALongDoubleSumForEveryLengthAndAcrossChunks) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<std::int64_t> lengths;
  for (std::int64_t n = 0; n <= 100; ++n) lengths.push_back(n);
  lengths.insert(lengths.end(), {65535, 65536, 65537, 2 * 65536 + 37});
  for (const std::int64_t n : lengths) {
    std::vector<float> g(static_cast<std::size_t>(n));
    for (float& x : g) x = u(rng);
    long double want = 0;
    for (float x : g) want += static_cast<long double>(x) * x;
    const double got = grad_norm_squared(g.data(), n);
    EXPECT_LE(std::fabs(static_cast<long double>(got) - want), 1e-15L * static_cast<long double>(n) * want + 1e-300L)
        << "n " << n;
  }
}

}  // namespace
}  // namespace lmcore::train
