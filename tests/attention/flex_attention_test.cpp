// flex attention, forward and backward, against the naive f64 reference (lmcore/attention/reference.h,
// which shares no code with the kernels) over masks, shapes, block sizes, score modifiers and dtypes.
//
// Bounds (tests/common/bounds.h): |diff| <= eps (a max|want| + r |want|), eps of the result dtype.
// Measured with LMCORE_TEST_REPORT_ERRORS=1 build/release/tests/attention/test_attention (Xeon with
// AVX-512, 2 threads), as eps max|want|, against the bound (a, r):
//
//   f32   out 2.8 (16, 0)  lse 1.1 (4, 0)   dq, dk, dv 4.5 (16, 0)   score-mod tables 15.4 (64, 0)
//   f64   out 4.0 (16, 0)  lse 1.1 (4, 0)   dq, dk, dv 10.6 (16, 0)  score-mod tables 14.1 (64, 0)
//         (f64 epsilons; the worst, dk of 600 causal keys, uses 66% of its bound)
//   bf16  out 0.33 (1/64, 1/2)   dq, dk, dv 0.37 (1/64, 1/2): the worst element uses 94% of the bound
//   f16   out 0.22 (1/8, 1/2)    dq, dk, dv 0.38 (1/8, 1/2):  the worst element uses 67%
//   bf16 on the matrix units (AMX / AVX-512 BF16 through oneDNN: P and dS rounded to bf16 before their
//   products, as FlashAttention does): out 0.36 (5/8, 0), dq, dk, dv 0.46 (5/8, 0): worst element 74%
//   (the widened path on the same cases: out 0.36, grads 0.38, within its (1/64, 1/2))
//
// Before: f32 2e-5 + 2e-5 |want| (out) and 5e-5 + 5e-5 |want| (grads), ~170-420 eps at these
// magnitudes; bf16 and f16 alike 2e-2 + 2e-2 |want| (out) and 6e-2 + 4e-2 |want| (grads): a gradient
// 10% wrong passed, and f16 had bf16's bound though its epsilon is 8x smaller; the tables 2e-4 (f32)
// and 0.3 (low precision). In bf16/f16 r = 1/2 is the final rounding of each element; what a covers
// is f32 arithmetic (~1e-6 relative). Every comparison also checks that its bound rejects a 1% error
// at the largest element and an error of 1% of max|want| at the smallest (close_within).
#include "lmcore/attention/flex_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "lmcore/attention/reference.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/parallel.h"
#include "tests/attention/test_util.h"
#include "tests/base/base_test_util.h"

namespace lmcore::attention {
namespace {

using base::testing::error_of;
using testing::Bound;
using testing::close_within;
using testing::max_abs;
using testing::random_tensor;

// Normal values in f64 with every mantissa bit used (random_tensor draws f32 values).
Tensor random_f64(const Shape& shape, std::uint32_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(checked_numel(shape)));
  for (double& x : values) x = dist(gen);
  return Tensor::from_vector(values, shape);
}

struct Case {
  std::string name;
  std::int64_t B, Hq, Hkv, L, S, D, Dv;
  std::int64_t q_block, kv_block;
  MaskMod mask;
  ScoreMod mod;
  DType dtype = DType::f32;
  double scale = 0.0;
};

std::vector<std::int64_t> doc_ids(std::int64_t n, std::int64_t len) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i / len + (i % 3 == 0 && i > 40 ? 0 : 0);
  return ids;
}

// Bounds in units of the result dtype's epsilon (tests/attention/test_util.h: |diff| <= eps (a max|want|
// + r |want|)), from the errors measured against the f64 reference (see the table at the top).
struct Bounds {
  Bound out, lse, grad, param;
};

Bounds bounds_for(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      // On the matrix units P and dS enter their products rounded to bf16 (FlashAttention's choice):
      // each term carries up to half an ulp, and the sums of them land at ~0.1-0.2 eps max|want| on top
      // of the final rounding. One a = 5/8 covers both (r = 0): with bf16's eps at 0.78%, a bound with
      // r = 1/2 on top would no longer reject a 1% error at the largest element.
      if (lowp_gemm_path(DType::bf16) == LowpGemmPath::onednn) return {{0.625, 0}, {4, 0}, {0.625, 0}, {64, 0}};
      return {{1.0 / 64, 0.5}, {4, 0}, {1.0 / 64, 0.5}, {64, 0}};
    case DType::f16: return {{1.0 / 8, 0.5}, {4, 0}, {1.0 / 8, 0.5}, {64, 0}};
    default: return {{16, 0}, {4, 0}, {16, 0}, {64, 0}};
  }
}

// Runs the case forward and backward through flex attention and compares with the naive reference.
void run_case(const Case& c, std::uint32_t seed) {
  SCOPED_TRACE(c.name);
  // f64: values with all 53 bits set (random_f64), so that any f32 rounding inside shows.
  auto rnd = [&](const Shape& shape, std::uint32_t s) {
    return c.dtype == DType::f64 ? random_f64(shape, s) : random_tensor(shape, s, c.dtype);
  };
  const Tensor q = rnd({c.B, c.Hq, c.L, c.D}, seed);
  const Tensor k = rnd({c.B, c.Hkv, c.S, c.D}, seed + 1);
  const Tensor v = rnd({c.B, c.Hkv, c.S, c.Dv}, seed + 2);
  const Tensor g = rnd({c.B, c.Hq, c.L, c.Dv}, seed + 3);
  // lse, the f32/f64 gradients' accumulation and the parameter gradients are in the compute dtype.
  const DType acc = c.dtype == DType::f64 ? DType::f64 : DType::f32;
  const BlockMask bm = create_block_mask(c.mask, c.B, c.Hq, c.L, c.S, c.q_block, c.kv_block);
  FlexOptions opt;
  opt.block_mask = &bm;
  opt.score_mod = c.mod;
  opt.scale = c.scale;
  opt.return_lse = true;
  const FlexResult r = flex_attention(q, k, v, opt);
  ASSERT_EQ(r.out.dtype(), c.dtype);
  // The reference reads the same (rounded) input values in f64.
  const FlexResult ref = attention_reference(q, k, v, c.mask, c.mod, c.scale);
  const Bounds b = bounds_for(c.dtype);
  EXPECT_TRUE(close_within(c.name + " out", r.out, ref.out, c.dtype, b.out));
  ASSERT_EQ(r.lse.dtype(), acc);
  EXPECT_TRUE(close_within(c.name + " lse", r.lse, ref.lse, acc, b.lse));

  const FlexGrads gr = flex_attention_backward(q, k, v, r.out, r.lse, g, opt);
  // In bf16/f16 the kernel forms delta = d_out . out from the rounded output it is given, as
  // FlashAttention does; the reference does the same from the same values (reference.h), so what is
  // left is f32 arithmetic and the final rounding of each gradient.
  const bool low = c.dtype != DType::f32 && c.dtype != DType::f64;
  const FlexGrads want = attention_backward_reference(q, k, v, g, c.mask, c.mod, c.scale, low ? r.out : Tensor());
  ASSERT_EQ(gr.dq.dtype(), c.dtype);
  // Where dq and dk vanish in exact arithmetic (a window of 0: each query sees only itself, so P = 1 and
  // dP = delta) the bound is relative to the terms that cancel, scale |k| |dO . v| (resp. |q|).
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  const double dp = max_abs(g) * max_abs(v) * static_cast<double>(c.Dv);
  const double terms_dq = max_abs(want.dq) == 0 ? scale * max_abs(k) * dp : 0.0;
  const double terms_dk = max_abs(want.dk) == 0 ? scale * max_abs(q) * dp : 0.0;
  EXPECT_TRUE(close_within(c.name + " dq", gr.dq, want.dq, c.dtype, b.grad, terms_dq));
  EXPECT_TRUE(close_within(c.name + " dk", gr.dk, want.dk, c.dtype, b.grad, terms_dk));
  EXPECT_TRUE(close_within(c.name + " dv", gr.dv, want.dv, c.dtype, b.grad));
  // Score-mod parameters (bias table, slopes): f32 sums over many elements.
  ASSERT_EQ(gr.score_mod_grads.size(), want.score_mod_grads.size());
  for (std::size_t p = 0; p < want.score_mod_grads.size(); ++p) {
    ASSERT_EQ(gr.score_mod_grads[p].dtype(), acc);
    EXPECT_TRUE(close_within(fmt::format("{} score_mod_grads[{}]", c.name, p), gr.score_mod_grads[p],
                             want.score_mod_grads[p], acc, b.param));
  }
}

TEST(FlexAttention, MasksShapesAndBlocksMatchReference) {
  const std::vector<Case> cases = {
      {"dense, one block", 1, 1, 1, 8, 8, 4, 4, 16, 16, MaskMod::all(), {}},
      {"causal, L != S, odd", 2, 2, 2, 37, 53, 8, 8, 16, 16, MaskMod::causal(), {}},
      {"causal, L > S", 1, 2, 1, 61, 23, 16, 8, 16, 8, MaskMod::causal(), {}},
      {"below one block", 1, 3, 3, 5, 7, 12, 20, 128, 128, MaskMod::causal(), {}},
      {"sliding window", 1, 2, 2, 90, 90, 16, 16, 16, 16, MaskMod::sliding_window(13), {}},
      {"sliding window 0", 1, 1, 1, 33, 33, 8, 8, 8, 8, MaskMod::sliding_window(0), {}},
      {"prefix lm", 1, 2, 2, 70, 70, 8, 8, 16, 32, MaskMod::prefix_lm(21), {}},
      {"document", 2, 2, 1, 80, 80, 8, 8, 16, 16, MaskMod::document(doc_ids(80, 23)), {}},
      {"chunked", 1, 2, 2, 75, 75, 8, 4, 16, 16, MaskMod::chunked(20), {}},
      {"GQA 4:1, sliding", 1, 8, 2, 50, 64, 16, 16, 16, 16, MaskMod::sliding_window(9), {}},
      {"causal & document", 1, 2, 2, 64, 64, 8, 8, 16, 16, MaskMod::causal() & MaskMod::document(doc_ids(64, 10)), {}},
      {"window | prefix", 1, 1, 1, 60, 60, 8, 8, 16, 16, MaskMod::sliding_window(4) | MaskMod::prefix_lm(7), {}},
      {"not causal (empty last row)", 1, 2, 2, 40, 40, 8, 8, 16, 16, !MaskMod::causal(), {}},
      {"head dim 256", 1, 1, 1, 20, 30, 256, 256, 16, 16, MaskMod::causal(), {}, DType::f32, 0.02},
      {"custom scale", 1, 1, 1, 20, 20, 8, 8, 8, 8, MaskMod::causal(), {}, DType::f32, 0.7},
  };
  std::uint32_t seed = 100;
  for (const Case& c : cases) run_case(c, seed += 10);
}

TEST(FlexAttention, ScoreModsMatchReference) {
  std::vector<float> bias(2 * (2 * 6 + 1));
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  const auto user = ScoreMod::from_function(
      [](float s, std::int64_t, std::int64_t h, std::int64_t q, std::int64_t kv) {
        return s * (1.0f + 0.1f * static_cast<float>(h)) + 0.01f * static_cast<float>(q - kv);
      },
      [](float, std::int64_t, std::int64_t h, std::int64_t, std::int64_t) { return 1.0f + 0.1f * static_cast<float>(h); });
  const std::vector<Case> cases = {
      {"alibi", 1, 4, 2, 40, 40, 8, 8, 16, 16, MaskMod::causal(), ScoreMod::alibi(ScoreMod::alibi_slopes(4))},
      {"softcap", 1, 2, 2, 45, 33, 8, 8, 16, 16, MaskMod::all(), ScoreMod::softcap(0.8f), DType::f32, 1.0},
      {"relative bias", 1, 2, 2, 40, 40, 8, 8, 16, 16, MaskMod::sliding_window(10), ScoreMod::relative_position_bias(bias, 6)},
      {"user with derivative", 1, 3, 3, 30, 30, 8, 8, 16, 16, MaskMod::causal(), user},
      {"alibi then softcap", 1, 2, 1, 50, 50, 8, 8, 16, 16, MaskMod::document(doc_ids(50, 12)),
       ScoreMod::alibi({0.5f, 0.25f}).then(ScoreMod::softcap(2.0f))},
      {"shared relative bias then user, then alibi", 2, 2, 2, 37, 29, 8, 8, 16, 8, MaskMod::all(),
       ScoreMod::relative_position_bias(std::vector<float>(bias.begin(), bias.begin() + 13), 6)
           .then(user)
           .then(ScoreMod::alibi({0.3f, -0.2f}))},
  };
  std::uint32_t seed = 500;
  for (const Case& c : cases) run_case(c, seed += 10);
}

TEST(FlexAttention, UserMaskCallable) {
  auto fn = [](std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) {
    return kv <= q && ((q - kv) % 3 != 1 || b == h);
  };
  run_case({"user mask", 2, 2, 2, 41, 41, 8, 8, 16, 16, MaskMod::from_function(fn), {}}, 900);
}

// The f64 path (f64 tiles and dgemm, tables and caps as given) against the reference, with bounds in
// f64 epsilons: an f32 step anywhere (a table, a cap, the scale, an accumulator rounded to f32) would
// miss them by ~1e8. Tables hold values that f32 cannot represent (thirds), the inputs use all 53 bits.
TEST(FlexAttention, F64MatchesReference) {
  std::vector<double> bias(2 * (2 * 5 + 1));
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<double>(i % 7) / 3.0 - 0.9;
  const std::vector<double> slopes = {1.0 / 3.0, 0.2, -1.0 / 7.0, 0.05};
  const auto user = ScoreMod::from_function(
      [](double s, std::int64_t, std::int64_t h, std::int64_t q, std::int64_t kv) {
        return s * (1.0 + 0.1 * static_cast<double>(h)) + 0.01 * static_cast<double>(q - kv) / 3.0;
      },
      [](double, std::int64_t, std::int64_t h, std::int64_t, std::int64_t) { return 1.0 + 0.1 * static_cast<double>(h); });
  const DType f64 = DType::f64;
  const std::vector<Case> cases = {
      {"f64 dense", 1, 2, 2, 19, 23, 8, 8, 16, 16, MaskMod::all(), {}, f64},
      {"f64 causal, L != S, odd blocks", 2, 2, 2, 37, 53, 8, 12, 16, 8, MaskMod::causal(), {}, f64},
      {"f64 sliding window", 1, 2, 2, 90, 90, 16, 16, 16, 16, MaskMod::sliding_window(13), {}, f64},
      {"f64 GQA 4:1, causal", 1, 8, 2, 40, 40, 16, 8, 16, 16, MaskMod::causal(), {}, f64},
      {"f64 not causal (empty last row)", 1, 2, 1, 48, 48, 8, 8, 16, 16, !MaskMod::causal(), {}, f64},
      {"f64 alibi", 1, 4, 2, 40, 40, 8, 8, 16, 16, MaskMod::sliding_window(9), ScoreMod::alibi(slopes), f64},
      {"f64 relative bias", 1, 2, 2, 40, 40, 8, 8, 16, 16, MaskMod::causal(), ScoreMod::relative_position_bias(bias, 5),
       f64},
      {"f64 trainable softcap", 1, 2, 2, 33, 45, 8, 8, 16, 16, MaskMod::all(), ScoreMod::softcap(1.0 / 3.0, true), f64,
       1.0},
      {"f64 alibi, trainable softcap, shared relative bias, GQA", 1, 4, 2, 50, 50, 8, 8, 16, 16,
       MaskMod::sliding_window(20),
       ScoreMod::alibi(slopes)
           .then(ScoreMod::softcap(2.0 / 3.0, true))
           .then(ScoreMod::relative_position_bias(std::vector<double>(bias.begin(), bias.begin() + 11), 5)),
       f64},
      {"f64 user with derivative then alibi", 1, 4, 4, 30, 30, 8, 8, 16, 16, MaskMod::causal(),
       user.then(ScoreMod::alibi(slopes)), f64},
      {"f64 head dim 256", 1, 1, 1, 20, 30, 256, 256, 16, 16, MaskMod::causal(), {}, f64, 0.02},
      // More than one forward span (512 keys): the online rescale between spans in f64.
      {"f64 causal, 600 keys", 1, 1, 1, 600, 600, 8, 8, 16, 16, MaskMod::causal(), {}, f64},
  };
  std::uint32_t seed = 700;
  for (const Case& c : cases) run_case(c, seed += 10);
}

TEST(FlexAttention, LowPrecision) {
  // bf16 on both paths: the matrix units (where this CPU has them) and widened to f32.
  for (bool onednn : {true, false}) {
    set_lowp_gemm_onednn(onednn);
    const std::string path = lowp_gemm_path(DType::bf16) == LowpGemmPath::onednn ? " (matrix units)" : " (widened)";
    run_case({"bf16 causal" + path, 1, 2, 1, 45, 45, 16, 16, 16, 16, MaskMod::causal(), {}, DType::bf16}, 1000);
    run_case({"bf16 dense 300, D 64" + path, 1, 2, 2, 300, 300, 64, 64, 128, 128, MaskMod::all(), {}, DType::bf16},
             1050);
    run_case({"bf16 document + softcap, GQA" + path, 2, 4, 2, 200, 200, 32, 32, 64, 64,
              MaskMod::document(doc_ids(200, 70)), ScoreMod::softcap(5.0f), DType::bf16},
             1070);
    // Rows of up to 132 key blocks of 16: more than one forward span on the matrix units (2048 keys)
    // and with sgemm (512), so the online rescale between spans is exercised on both paths.
    run_case({"bf16 causal, 2100 keys" + path, 1, 1, 1, 2100, 2100, 16, 16, 16, 16, MaskMod::causal(), {}, DType::bf16},
             1080);
  }
  set_lowp_gemm_onednn(true);
  run_case({"f16 window + softcap", 1, 2, 2, 50, 40, 16, 8, 16, 16, MaskMod::sliding_window(7), ScoreMod::softcap(3.0f),
            DType::f16},
           1100);
}

// A gradient on lse too (flex_attention_backward's d_lse), in f32 and f64, with value head dim 256 (the
// kernels' limit; the extra value column that lmcore.torch used to carry d_lse could not go past it), a
// score modifier with parameters, GQA and rows the mask empties (whose d_lse must reach nothing).
TEST(FlexAttention, LseGradientMatchesReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const std::int64_t B = 1, Hq = 4, Hkv = 2, L = 37, S = 37, D = 8, Dv = 256;
    auto rnd = [&](const Shape& shape, std::uint32_t s) {
      return dt == DType::f64 ? random_f64(shape, s) : random_tensor(shape, s, dt);
    };
    const Tensor q = rnd({B, Hq, L, D}, 41), k = rnd({B, Hkv, S, D}, 42), v = rnd({B, Hkv, S, Dv}, 43);
    const Tensor g = rnd({B, Hq, L, Dv}, 44), gl = rnd({B, Hq, L}, 45);
    const MaskMod mask = MaskMod::sliding_window(9) & MaskMod::from_function([](std::int64_t, std::int64_t,
                                                                                std::int64_t qi, std::int64_t) {
                           return qi >= 2;  // rows 0 and 1 empty
                         });
    const ScoreMod mod = ScoreMod::alibi({0.5, 1.0 / 3.0, 0.25, 0.2}).then(ScoreMod::softcap(3.0, true));
    const BlockMask bm = create_block_mask(mask, 1, 1, L, S, 16, 16);
    FlexOptions opt;
    opt.block_mask = &bm;
    opt.score_mod = mod;
    opt.return_lse = true;
    const FlexResult r = flex_attention(q, k, v, opt);
    const FlexGrads gr = flex_attention_backward(q, k, v, r.out, r.lse, g, gl, opt);
    const FlexGrads want = attention_backward_reference(q, k, v, g, mask, mod, 0.0, Tensor(), gl);
    // Without d_lse the gradients differ (by far more than the bounds): the test sees it.
    const FlexGrads without = attention_backward_reference(q, k, v, g, mask, mod);
    const std::vector<double> a = want.dq.to_vector<double>(), c = without.dq.to_vector<double>();
    double moved = 0;
    for (std::size_t i = 0; i < a.size(); ++i) moved = std::max(moved, std::abs(a[i] - c[i]));
    EXPECT_GT(moved, 0.01 * max_abs(want.dq));
    const Bounds b = bounds_for(dt);
    for (const auto& [name, got, ref] : {std::tuple{"dq", gr.dq, want.dq}, std::tuple{"dk", gr.dk, want.dk},
                                         std::tuple{"dv", gr.dv, want.dv}})
      EXPECT_TRUE(close_within(std::string("d_lse ") + name, got, ref, dt, b.grad));
    for (std::size_t p = 0; p < want.score_mod_grads.size(); ++p)
      EXPECT_TRUE(close_within(fmt::format("d_lse score_mod_grads[{}]", p), gr.score_mod_grads[p],
                               want.score_mod_grads[p], dt, b.param));
    const auto dq = gr.dq.to_vector<double>();
    for (std::int64_t i = 0; i < 2 * D; ++i) EXPECT_EQ(dq[static_cast<std::size_t>(i)], 0.0) << i;  // empty rows
    // A d_lse of the wrong shape is refused, naming it.
    std::string msg;
    try {
      flex_attention_backward(q, k, v, r.out, r.lse, g, rnd({B, Hq, L + 1}, 46), opt);
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("'d_lse' must have lse's shape [1, 4, 37]"), std::string::npos) << msg;
  }
}

TEST(FlexAttention, EmptyRowsGiveZeroAndMinusInfinityNeverNaN) {
  // Queries 0..9 see nothing: kv must be > q + 100 beyond the sequence for them.
  const MaskMod m = MaskMod::from_function([](std::int64_t, std::int64_t, std::int64_t q, std::int64_t kv) {
    return q >= 10 && kv <= q;
  });
  const Tensor q = random_tensor({1, 1, 30, 8}, 1), k = random_tensor({1, 1, 30, 8}, 2),
               v = random_tensor({1, 1, 30, 8}, 3), g = random_tensor({1, 1, 30, 8}, 4);
  for (std::int64_t block : {8, 128}) {
    const BlockMask bm = create_block_mask(m, 1, 1, 30, 30, block, block);
    FlexOptions opt;
    opt.block_mask = &bm;
    opt.return_lse = true;
    const FlexResult r = flex_attention(q, k, v, opt);
    const auto out = r.out.to_vector<float>(), lse = r.lse.to_vector<float>();
    for (std::int64_t i = 0; i < 30; ++i) {
      if (i < 10) {
        EXPECT_EQ(lse[static_cast<std::size_t>(i)], -INFINITY) << i;
        for (std::int64_t j = 0; j < 8; ++j) EXPECT_EQ(out[static_cast<std::size_t>(i * 8 + j)], 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(lse[static_cast<std::size_t>(i)]));
      }
    }
    const FlexGrads gr = flex_attention_backward(q, k, v, r.out, r.lse, g, opt);
    for (const Tensor& t : {gr.dq, gr.dk, gr.dv})
      for (float x : t.to_vector<float>()) ASSERT_TRUE(std::isfinite(x));
    const auto dq = gr.dq.to_vector<float>();
    for (std::int64_t i = 0; i < 10 * 8; ++i) EXPECT_EQ(dq[static_cast<std::size_t>(i)], 0.0f);
    const FlexGrads want = attention_backward_reference(q, k, v, g, m);
    EXPECT_TRUE(close_within("dk", gr.dk, want.dk, DType::f32, bounds_for(DType::f32).grad));
  }
}

// The NaN rule (lmcore/core/internal/row_kernels.h): a NaN in query row i makes row i's output and lse
// NaN, never a finite value or an "empty row" (0, -inf) that hides it; the other rows keep their bits.
// A NaN in a key every query can see makes every row NaN; one the mask hides changes nothing.
TEST(FlexAttention, NanInputsGiveNanRowsAndOnlyThose) {
  const Tensor q = random_tensor({1, 2, 40, 8}, 31), k = random_tensor({1, 2, 40, 8}, 32),
               v = random_tensor({1, 2, 40, 8}, 33);
  for (std::int64_t block : {16, 128}) {
    SCOPED_TRACE("block " + std::to_string(block));
    const BlockMask bm = create_block_mask(MaskMod::causal(), 1, 1, 40, 40, block, block);
    FlexOptions opt;
    opt.block_mask = &bm;
    opt.return_lse = true;
    const FlexResult clean = flex_attention(q, k, v, opt);
    for (std::int64_t row : {0, 17, 39}) {
      std::vector<float> qv = q.to_vector<float>();
      qv[static_cast<std::size_t>((1 * 40 + row) * 8 + 3)] = NAN;  // head 1, query `row`
      const FlexResult r = flex_attention(Tensor::from_vector(qv, q.shape()), k, v, opt);
      const auto out = r.out.to_vector<float>(), lse = r.lse.to_vector<float>();
      const auto out0 = clean.out.to_vector<float>(), lse0 = clean.lse.to_vector<float>();
      for (std::int64_t i = 0; i < 2 * 40; ++i) {
        const bool poisoned = i == 40 + row;
        EXPECT_EQ(std::isnan(lse[static_cast<std::size_t>(i)]), poisoned) << "row " << i;
        if (!poisoned) {
          EXPECT_EQ(lse[static_cast<std::size_t>(i)], lse0[static_cast<std::size_t>(i)]) << "row " << i;
        }
        for (std::int64_t e = 0; e < 8; ++e) {
          const std::size_t at = static_cast<std::size_t>(i * 8 + e);
          EXPECT_TRUE(poisoned ? std::isnan(out[at]) : out[at] == out0[at]) << "row " << i;
        }
      }
    }
    // Key 0 is seen by every query under the causal mask; the last key only by the last query.
    for (std::int64_t key : {0, 39}) {
      std::vector<float> kv = k.to_vector<float>();
      kv[static_cast<std::size_t>(key * 8)] = NAN;  // head 0
      const FlexResult r = flex_attention(q, Tensor::from_vector(kv, k.shape()), v, opt);
      const auto lse = r.lse.to_vector<float>();
      for (std::int64_t i = 0; i < 40; ++i) EXPECT_EQ(std::isnan(lse[static_cast<std::size_t>(i)]), i >= key) << i;
      for (std::int64_t i = 40; i < 80; ++i) EXPECT_FALSE(std::isnan(lse[static_cast<std::size_t>(i)])) << i;
    }
  }
}

TEST(FlexAttention, NoBlockMaskIsDenseAndStridedInputsWork) {
  // Every input a non-contiguous view: q and d_out transposed out of [B, L, H, D], k a slice of a wider
  // head dim, v transposed; the results must equal those of contiguous copies bit for bit and match
  // the reference, forward and backward.
  const Tensor q = random_tensor({1, 33, 2, 8}, 7).transpose(1, 2);               // [1, 2, 33, 8]
  const Tensor k = random_tensor({1, 2, 21, 11}, 8).narrow(3, 2, 8);              // [1, 2, 21, 8]
  const Tensor v = random_tensor({1, 21, 2, 8}, 9).transpose(1, 2);               // [1, 2, 21, 8]
  const Tensor g = random_tensor({1, 33, 2, 8}, 10).transpose(1, 2);              // [1, 2, 33, 8]
  ASSERT_FALSE(q.is_contiguous() || k.is_contiguous() || v.is_contiguous() || g.is_contiguous());
  FlexOptions opt;
  opt.return_lse = true;
  const FlexResult r = flex_attention(q, k, v, opt);
  const FlexResult ref = attention_reference(q, k, v, MaskMod::all());
  const Bounds b = bounds_for(DType::f32);
  EXPECT_TRUE(close_within("out", r.out, ref.out, DType::f32, b.out));
  EXPECT_TRUE(close_within("lse", r.lse, ref.lse, DType::f32, b.lse));
  const FlexGrads gr = flex_attention_backward(q, k, v, r.out, r.lse, g, opt);
  const FlexGrads want = attention_backward_reference(q, k, v, g, MaskMod::all());
  EXPECT_TRUE(close_within("dq", gr.dq, want.dq, DType::f32, b.grad));
  EXPECT_TRUE(close_within("dk", gr.dk, want.dk, DType::f32, b.grad));
  EXPECT_TRUE(close_within("dv", gr.dv, want.dv, DType::f32, b.grad));
  // The same bits as the contiguous copies.
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), gc = g.contiguous();
  const FlexResult rc = flex_attention(qc, kc, vc, opt);
  EXPECT_EQ(r.out.to_vector<float>(), rc.out.to_vector<float>());
  const FlexGrads gc2 = flex_attention_backward(qc, kc, vc, rc.out, rc.lse, gc, opt);
  EXPECT_EQ(gr.dq.to_vector<float>(), gc2.dq.to_vector<float>());
  EXPECT_EQ(gr.dk.to_vector<float>(), gc2.dk.to_vector<float>());
  EXPECT_EQ(gr.dv.to_vector<float>(), gc2.dv.to_vector<float>());
  // A strided out and lse into the backward (views of wider buffers) give the same bits too.
  const Tensor out_view = Tensor::zeros({1, 33, 2, 8}, DType::f32).transpose(1, 2);
  Tensor ov = out_view;
  ov.copy_(r.out);
  const FlexGrads gs = flex_attention_backward(q, k, v, ov, r.lse, g, opt);
  EXPECT_EQ(gs.dq.to_vector<float>(), gr.dq.to_vector<float>());
  const FlexResult r2 = flex_attention(q, k, v);
  EXPECT_FALSE(r2.lse.defined());
}

TEST(FlexAttention, BackwardIsDeterministic) {
  const Tensor q = random_tensor({1, 4, 200, 16}, 11), k = random_tensor({1, 2, 200, 16}, 12),
               v = random_tensor({1, 2, 200, 16}, 13), g = random_tensor({1, 4, 200, 16}, 14);
  const BlockMask bm = create_block_mask(MaskMod::causal(), 1, 1, 200, 200, 32, 32);
  FlexOptions opt;
  opt.block_mask = &bm;
  opt.return_lse = true;
  const FlexResult r = flex_attention(q, k, v, opt);
  const FlexGrads a = flex_attention_backward(q, k, v, r.out, r.lse, g, opt);
  for (int rep = 0; rep < 3; ++rep) {
    const FlexGrads b = flex_attention_backward(q, k, v, r.out, r.lse, g, opt);
    EXPECT_EQ(a.dq.to_vector<float>(), b.dq.to_vector<float>());
    EXPECT_EQ(a.dk.to_vector<float>(), b.dk.to_vector<float>());
    EXPECT_EQ(a.dv.to_vector<float>(), b.dv.to_vector<float>());
  }
}

TEST(FlexAttention, Validation) {
  const Tensor q = random_tensor({1, 3, 8, 4}, 1), k = random_tensor({1, 2, 8, 4}, 2), v = random_tensor({1, 2, 8, 4}, 3);
  EXPECT_THROW(flex_attention(q, k, v), Error);  // 3 heads over 2
  const Tensor q2 = random_tensor({1, 2, 8, 4}, 1);
  const BlockMask wrong = create_block_mask(MaskMod::causal(), 1, 1, 9, 8);
  FlexOptions opt;
  opt.block_mask = &wrong;
  EXPECT_THROW(flex_attention(q2, k, v, opt), Error);
  EXPECT_THROW(flex_attention(q2, k.to(DType::bf16), v), Error);
  const Tensor big = random_tensor({1, 1, 4, 257}, 4);
  EXPECT_THROW(flex_attention(big, big, big), Error);
  FlexOptions noderiv;
  noderiv.score_mod = ScoreMod::from_function([](float s, std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return s; });
  noderiv.return_lse = true;
  const FlexResult r = flex_attention(q2, k, v, noderiv);  // the forward needs no derivative
  EXPECT_THROW(flex_attention_backward(q2, k, v, r.out, r.lse, r.out, noderiv), Error);
  FlexOptions alibi;
  alibi.score_mod = ScoreMod::alibi({0.5f});  // one slope, two heads
  EXPECT_THROW(flex_attention(q2, k, v, alibi), Error);
}

TEST(FlexAttention, MaskBuiltForAnotherBatchOrHeadCountIsAnError) {
  // q [2, 2, 8, 4]; masks built for B = 3 or H = 4 must be refused whether the mask depends on (b, h)
  // (a callable: one row set per (b, h)) or not (a built-in: one shared row set).
  const Tensor q = random_tensor({2, 2, 8, 4}, 1), k = random_tensor({2, 2, 8, 4}, 2), v = random_tensor({2, 2, 8, 4}, 3);
  const MaskMod callable = MaskMod::from_function([](std::int64_t, std::int64_t, std::int64_t qi, std::int64_t ki) { return ki <= qi; });
  for (const MaskMod& mask : {MaskMod::causal(), callable}) {
    SCOPED_TRACE(mask.describe());
    for (auto [b, h, ok] : {std::tuple{3, 1, false}, std::tuple{1, 4, false}, std::tuple{3, 4, false},
                            std::tuple{2, 2, true}, std::tuple{1, 1, true}, std::tuple{2, 1, true}, std::tuple{1, 2, true}}) {
      const BlockMask bm = create_block_mask(mask, b, h, 8, 8, 4, 4);
      const BlockMask dense = dense_block_mask(mask, b, h, 8, 8, 4, 4);
      for (const BlockMask* m : {&bm, &dense}) {
        FlexOptions opt;
        opt.block_mask = m;
        opt.return_lse = true;
        if (ok) {
          const FlexResult r = flex_attention(q, k, v, opt);
          EXPECT_NO_THROW(flex_attention_backward(q, k, v, r.out, r.lse, r.out, opt));
          continue;
        }
        const std::string msg = error_of([&] { flex_attention(q, k, v, opt); });
        EXPECT_NE(msg.find(b != 1 ? "built for batch B = 3, expected 1 or q's batch 2" : "built for H = 4 heads"),
                  std::string::npos) << msg;
        const FlexResult r = flex_attention(q, k, v);
        EXPECT_THROW(flex_attention_backward(q, k, v, r.out, r.lse, r.out, opt), Error);
      }
    }
  }
}

// flex_attention_into / _backward_into as a model calls them: q, k, v as views of one packed
// (B, T, Hq + 2 Hkv, D) activation, out and dq, dk, dv written into views of wider buffers (a padded
// head dim whose extra columns must stay untouched). The results equal those of the allocating entry
// points bit for bit (rounded to the input dtype where those round), f32, f64 and bf16, with GQA, a
// causal mask and an ALiBi score_mod (its parameter gradients returned); bad outputs are errors naming them.
TEST(FlexAttention, IntoWritesStridedOutputsWithTheSameBits) {
  const std::int64_t B = 2, T = 45, Hq = 4, Hkv = 2, D = 8, W = D + 3;
  const BlockMask bm = create_block_mask(MaskMod::causal(), 1, 1, T, T, 16, 16);
  FlexOptions opt;
  opt.block_mask = &bm;
  opt.return_lse = true;
  opt.score_mod = ScoreMod::alibi({0.5f, 0.25f, 0.125f, 0.0625f});
  for (const DType dt : {DType::f32, DType::f64, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const DType acc = dt == DType::f64 ? DType::f64 : DType::f32;
    const Tensor qkv = random_f64({B, T, Hq + 2 * Hkv, D}, 21).to(dt);
    const Tensor q = qkv.narrow(2, 0, Hq).permute({0, 2, 1, 3});
    const Tensor k = qkv.narrow(2, Hq, Hkv).permute({0, 2, 1, 3});
    const Tensor v = qkv.narrow(2, Hq + Hkv, Hkv).permute({0, 2, 1, 3});
    const Tensor g = random_f64({B, T, Hq, D}, 22).to(dt).permute({0, 2, 1, 3});
    const FlexResult r = flex_attention(q, k, v, opt);
    const FlexGrads want = flex_attention_backward(q, k, v, r.out, r.lse, g, opt);

    Tensor out_buf = Tensor::full({B, T, Hq, W}, 7.0, acc);
    const Tensor out = out_buf.narrow(3, 0, D).permute({0, 2, 1, 3});
    const Tensor lse = Tensor::empty({B, Hq, T}, acc);
    flex_attention_into(q, k, v, out, lse, opt);
    EXPECT_EQ(out.to(dt).to_vector<double>(), r.out.to_vector<double>());
    EXPECT_EQ(lse.to_vector<double>(), r.lse.to_vector<double>());
    EXPECT_EQ(out_buf.narrow(3, D, W - D).contiguous().to_vector<double>(),
              std::vector<double>(static_cast<std::size_t>(B * T * Hq * (W - D)), 7.0));

    Tensor d_buf = Tensor::full({B, T, Hq + 2 * Hkv, W}, 7.0, acc);
    const Tensor d = d_buf.narrow(3, 0, D);
    const Tensor dq = d.narrow(2, 0, Hq).permute({0, 2, 1, 3});
    const Tensor dk = d.narrow(2, Hq, Hkv).permute({0, 2, 1, 3});
    const Tensor dv = d.narrow(2, Hq + Hkv, Hkv).permute({0, 2, 1, 3});
    const std::vector<Tensor> mod_grads = flex_attention_backward_into(q, k, v, r.out, r.lse, g, dq, dk, dv, opt);
    EXPECT_EQ(dq.to(dt).to_vector<double>(), want.dq.to_vector<double>());
    EXPECT_EQ(dk.to(dt).to_vector<double>(), want.dk.to_vector<double>());
    EXPECT_EQ(dv.to(dt).to_vector<double>(), want.dv.to_vector<double>());
    ASSERT_EQ(mod_grads.size(), want.score_mod_grads.size());
    ASSERT_EQ(mod_grads.size(), 1u);
    EXPECT_EQ(mod_grads[0].to_vector<double>(), want.score_mod_grads[0].to_vector<double>());
    EXPECT_EQ(d_buf.narrow(3, D, W - D).contiguous().to_vector<double>(),
              std::vector<double>(static_cast<std::size_t>(B * T * (Hq + 2 * Hkv) * (W - D)), 7.0));
    EXPECT_GT(max_abs(want.dk.to(DType::f64)), 0.0);  // the comparison compares something

    // Outputs that do not fit: the wrong dtype, a non-contiguous lse, a strided last dim.
    const Tensor wrong = Tensor::empty({B, Hq, T, D}, dt == DType::f64 ? DType::f32 : DType::f64);
    EXPECT_NE(error_of([&] { flex_attention_into(q, k, v, wrong, lse, opt); }).find("'out' must be"), std::string::npos);
    const Tensor lse_t = Tensor::empty({B, T, Hq}, acc).permute({0, 2, 1});
    EXPECT_NE(error_of([&] { flex_attention_into(q, k, v, out, lse_t, opt); }).find("'lse' must have contiguous strides"),
              std::string::npos);
    const Tensor spread = Tensor::empty({B, Hq, T, 2 * D}, acc).narrow(3, 0, 2 * D - 1);
    const Tensor every_other = Tensor::from_blob(spread.data_ptr(), {B, Hq, T, D}, acc, nullptr,
                                                 {Hq * T * 2 * D, T * 2 * D, 2 * D, 2});
    EXPECT_NE(error_of([&] { flex_attention_backward_into(q, k, v, r.out, r.lse, g, every_other, dk, dv, opt); })
                  .find("'dq' must have a contiguous last dim"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace lmcore::attention
