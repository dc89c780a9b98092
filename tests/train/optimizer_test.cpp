// AdamW against a plain double-precision twin of torch.optim.AdamW's update, the schedules' values, and
// gradient clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "lmcore/model/parameters.h"
#include "lmcore/train/adamw.h"
#include "lmcore/train/lr_schedule.h"
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

}  // namespace
}  // namespace lmcore::train
