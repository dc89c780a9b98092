// Gradients of the score modifiers' parameters (relative-position bias table, ALiBi slopes) from
// flex_attention_backward, against central finite differences of the naive reference's loss (an
// oracle that does not share the backward's chain rule), plus determinism and the opt-out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lmcore/attention/flex_attention.h"
#include "lmcore/attention/reference.h"
#include "tests/attention/test_util.h"

namespace lmcore::attention {
namespace {

using testing::random_tensor;

// Kernel (f32) against the reference: |diff| <= a eps max|want| with eps = 2^-23 (see the figures above).
constexpr testing::Bound kParamBound{64, 0};

// loss = sum(out * g) through the f64 reference.
double reference_loss(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const MaskMod& mask,
                      const ScoreMod& mod) {
  const std::vector<double> out = attention_reference(q, k, v, mask, mod).out.to_vector<double>();
  const std::vector<double> w = g.to_vector<double>();
  double sum = 0;
  for (std::size_t i = 0; i < out.size(); ++i) sum += out[i] * w[i];
  return sum;
}

struct Problem {
  Tensor q, k, v, g;
  MaskMod mask;
};

Problem make_problem(std::int64_t H, std::int64_t Hkv, std::int64_t L, std::int64_t S, MaskMod mask, std::uint32_t seed) {
  return {random_tensor({1, H, L, 8}, seed), random_tensor({1, Hkv, S, 8}, seed + 1),
          random_tensor({1, Hkv, S, 8}, seed + 2), random_tensor({1, H, L, 8}, seed + 3), std::move(mask)};
}

std::vector<float> kernel_grad(const Problem& p, const ScoreMod& mod, std::size_t which, std::int64_t block) {
  const std::int64_t H = p.q.size(1), L = p.q.size(2), S = p.k.size(2);
  const BlockMask bm = create_block_mask(p.mask, 1, H, L, S, block, block);
  FlexOptions opt;
  opt.block_mask = &bm;
  opt.score_mod = mod;
  opt.return_lse = true;
  const FlexResult r = flex_attention(p.q, p.k, p.v, opt);
  const FlexGrads gr = flex_attention_backward(p.q, p.k, p.v, r.out, r.lse, p.g, opt);
  EXPECT_EQ(static_cast<std::int64_t>(gr.score_mod_grads.size()), mod.num_parameter_steps());
  return gr.score_mod_grads.at(which).to_vector<float>();
}

std::vector<double> reference_grad(const Problem& p, const ScoreMod& mod, std::size_t which) {
  return attention_backward_reference(p.q, p.k, p.v, p.g, p.mask, mod).score_mod_grads.at(which).to_vector<double>();
}

// The kernel's gradient of table `which` against the f64 reference's chain rule, and that chain rule
// against finite differences of the reference's loss in each entry of `table` (rebuilt into a ScoreMod
// by make). The differences use the fourth-order stencil with h = 2^-12, whose steps are exact in f32
// for these tables (multiples of 2^-6): truncation ~(h |kv - q|)^4 f^(5) / 30, below 1e-9 even for the
// slopes, whose scores move by (kv - q) h; rounding ~1e-16 |loss| / h ~ 1e-11.
template <typename Make>
void expect_matches_finite_differences(const Problem& p, std::vector<float> table, Make make, std::size_t which,
                                       const char* name) {
  SCOPED_TRACE(name);
  const std::vector<float> got = kernel_grad(p, make(table), which, 16);
  const std::vector<double> want = reference_grad(p, make(table), which);
  ASSERT_EQ(got.size(), table.size());
  ASSERT_EQ(want.size(), table.size());
  const Shape shape{static_cast<std::int64_t>(got.size())};
  EXPECT_TRUE(testing::close_within(std::string(name) + " kernel vs reference", Tensor::from_vector(got, shape),
                                    Tensor::from_vector(want, shape), DType::f32, kParamBound));
  const float h = 0x1p-12f;
  std::vector<double> fd(table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    const float x = table[i];
    auto loss_at = [&](float step) {
      table[i] = x + step;
      const double l = reference_loss(p.q, p.k, p.v, p.g, p.mask, make(table));
      table[i] = x;
      return l;
    };
    fd[i] = (8.0 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12.0 * h);
  }
  bounds::report_error(std::string(name) + " reference vs differences", Tensor::from_vector(want, shape),
                       Tensor::from_vector(fd, shape), DType::f64, {1, 0});
  // Measured |reference - differences| <= 2.7e-11 max|grad| (softcap, alibi, softcap); 1e-9 keeps a
  // margin of 37 and is ten million times below a 1% error.
  EXPECT_TRUE(testing::all_close(std::string(name) + " reference vs finite differences", Tensor::from_vector(want, shape),
                                 Tensor::from_vector(fd, shape), 1e-9 * testing::max_abs(Tensor::from_vector(fd, shape)),
                                 0.0));
}

// A trainable softcap: the cap gets d loss / d cap, alone and between two parameter steps (the slopes
// before it chain through its derivative in the score, the bias after it does not).
TEST(ScoreModGrads, TrainableSoftcapMatchesFiniteDifferences) {
  const Problem p = make_problem(2, 2, 27, 31, MaskMod::sliding_window(11), 60);
  expect_matches_finite_differences(
      p, {1.5f}, [](const std::vector<float>& t) { return ScoreMod::softcap(t[0], true); }, 0, "trainable softcap");
  const std::vector<float> slopes{0.5f, 0.25f};
  const std::vector<float> bias{0.25f, -0.5f, 0.75f};
  auto chain = [&](const std::vector<float>& t) {
    return ScoreMod::alibi(slopes).then(ScoreMod::softcap(t[0], true)).then(ScoreMod::relative_position_bias(bias, 1));
  };
  expect_matches_finite_differences(p, {2.0f}, chain, 1, "alibi, trainable softcap, bias");
  auto slopes_of = [&](const std::vector<float>& t) {
    return ScoreMod::alibi(t).then(ScoreMod::softcap(2.0f, true)).then(ScoreMod::relative_position_bias(bias, 1));
  };
  expect_matches_finite_differences(p, slopes, slopes_of, 0, "slopes before a trainable softcap");
  EXPECT_EQ(chain({2.0f}).parameter_shapes(), (std::vector<std::vector<std::int64_t>>{{2}, {1}, {1, 3}}));
  EXPECT_EQ(ScoreMod::softcap(2.0f).num_parameter_steps(), 0);
}

TEST(ScoreModGrads, RelativeBiasMatchesFiniteDifferences) {
  const Problem p = make_problem(2, 1, 29, 35, MaskMod::sliding_window(9) | MaskMod::prefix_lm(3), 40);
  std::vector<float> bias(2 * 9);
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
  // Per-head rows, R = 4, with a softcap after it: the cap's derivative chains into the table's gradient.
  expect_matches_finite_differences(
      p, bias, [](const std::vector<float>& t) { return ScoreMod::relative_position_bias(t, 4).then(ScoreMod::softcap(1.5f)); },
      0, "per-head bias then softcap");
  // One row shared by both heads: each entry collects both heads.
  expect_matches_finite_differences(
      p, std::vector<float>(bias.begin(), bias.begin() + 9),
      [](const std::vector<float>& t) { return ScoreMod::relative_position_bias(t, 4); }, 0, "shared bias");
}

TEST(ScoreModGrads, AlibiMatchesFiniteDifferences) {
  // GQA 4:2, causal; the slopes come second in the chain (after a softcap, before another).
  const Problem p = make_problem(4, 2, 33, 33, MaskMod::causal(), 60);
  expect_matches_finite_differences(
      p, ScoreMod::alibi_slopes(4),
      [](const std::vector<float>& t) {
        return ScoreMod::softcap(4.0f).then(ScoreMod::alibi(t)).then(ScoreMod::softcap(3.0f));
      },
      0, "softcap, alibi, softcap");
}

TEST(ScoreModGrads, DeterministicAndOptional) {
  const Problem p = make_problem(2, 2, 150, 150, MaskMod::causal(), 80);
  std::vector<float> bias(2 * 21);
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.05f * static_cast<float>(i % 9);
  const ScoreMod mod = ScoreMod::relative_position_bias(bias, 10).then(ScoreMod::alibi({0.1f, 0.2f}));
  const std::vector<float> a0 = kernel_grad(p, mod, 0, 16), a1 = kernel_grad(p, mod, 1, 16);
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_EQ(kernel_grad(p, mod, 0, 16), a0);
    EXPECT_EQ(kernel_grad(p, mod, 1, 16), a1);
  }
  const BlockMask bm = create_block_mask(p.mask, 1, 1, 150, 150, 32, 32);
  FlexOptions opt;
  opt.block_mask = &bm;
  opt.score_mod = mod;
  opt.return_lse = true;
  opt.score_mod_grads = false;
  const FlexResult r = flex_attention(p.q, p.k, p.v, opt);
  EXPECT_TRUE(flex_attention_backward(p.q, p.k, p.v, r.out, r.lse, p.g, opt).score_mod_grads.empty());
  EXPECT_EQ(mod.parameter_shapes(), (std::vector<std::vector<std::int64_t>>{{2, 21}, {2}}));
}

// The element and tile forms agree in each precision (to a few epsilons: the tile form multiplies by
// 1 / cap where the element form divides), and the double forms keep the tables and the cap as given
// (f64), while the float forms use them rounded to f32 (what the f32 kernels compute with).
TEST(ScoreModGrads, ElementAndTileFormsAgreeInF32AndF64) {
  const ScoreMod mod = ScoreMod::alibi({1.0 / 3.0, -0.2})
                           .then(ScoreMod::softcap(2.0 / 3.0, true))
                           .then(ScoreMod::relative_position_bias({0.1, 1.0 / 7.0, -0.3}, 1));
  ASSERT_EQ(mod.num_parameter_steps(), 3);
  const std::int64_t nq = 3, nk = 4, q0 = 5, k0 = 3, h = 1;
  std::vector<double> s64(nq * nk), d64(nq * nk), suf64(3 * nq * nk);
  std::vector<float> s32(nq * nk), d32(nq * nk), suf32(3 * nq * nk);
  for (std::int64_t i = 0; i < nq * nk; ++i) {
    s64[static_cast<std::size_t>(i)] = 0.3 * static_cast<double>(i) - 1.1;
    s32[static_cast<std::size_t>(i)] = static_cast<float>(s64[static_cast<std::size_t>(i)]);
  }
  const std::vector<double> in64 = s64;
  const std::vector<float> in32 = s32;
  double* t64[3] = {suf64.data(), suf64.data() + nq * nk, suf64.data() + 2 * nq * nk};
  float* t32[3] = {suf32.data(), suf32.data() + nq * nk, suf32.data() + 2 * nq * nk};
  mod.apply_tile(0, h, q0, nq, k0, nk, s64.data(), nk, d64.data(), t64);
  mod.apply_tile(0, h, q0, nq, k0, nk, s32.data(), nk, d32.data(), t32);
  for (std::int64_t i = 0; i < nq; ++i) {
    for (std::int64_t j = 0; j < nk; ++j) {
      const std::size_t e = static_cast<std::size_t>(i * nk + j);
      double d = 0, su[3] = {};
      const double y = mod.apply(in64[e], 0, h, q0 + i, k0 + j, &d, su);
      const auto near64 = [](double a, double b) { return std::abs(a - b) <= 4 * 0x1p-52 * (std::abs(b) + 1); };
      const auto near32 = [](float a, float b) { return std::abs(a - b) <= 4 * 0x1p-23f * (std::abs(b) + 1); };
      EXPECT_PRED2(near64, y, s64[e]);
      EXPECT_PRED2(near64, d, d64[e]);
      for (int p = 0; p < 3; ++p) EXPECT_PRED2(near64, su[p], t64[p][e]) << p;
      float df = 0, suf[3] = {};
      const float yf = mod.apply(in32[e], 0, h, q0 + i, k0 + j, &df, suf);
      EXPECT_PRED2(near32, yf, s32[e]);
      EXPECT_PRED2(near32, df, d32[e]);
      for (int p = 0; p < 3; ++p) EXPECT_PRED2(near32, suf[p], t32[p][e]) << p;
      // The f64 form from the formulas, with the f64 parameters: within a few f64 epsilons.
      const double x = in64[e] + (-0.2) * static_cast<double>(k0 + j - (q0 + i));
      const double c = 2.0 / 3.0, t = std::tanh(x / c);
      const double bias[3] = {0.1, 1.0 / 7.0, -0.3};
      const double want = c * t + bias[std::clamp<std::int64_t>(q0 + i - (k0 + j), -1, 1) + 1];
      EXPECT_NEAR(y, want, 8 * 0x1p-52 * (std::abs(want) + 1));
      // The f32 form differs from it by f32 rounding, far more than the f64 bound.
      EXPECT_GT(std::abs(static_cast<double>(yf) - want), 1e3 * 0x1p-52 * (std::abs(want) + 1));
    }
  }
}

}  // namespace
}  // namespace lmcore::attention
