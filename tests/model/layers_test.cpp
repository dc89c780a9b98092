// Each layer of layers.h against its scalar twin in reference.h, over awkward sizes and both thread
// counts. Bounds are a few f32 epsilons of the magnitudes involved, times sqrt(terms) for sums (vector
// partial sums keep the rounding error near sqrt(C) eps). The errors measured on this file's sizes are
// at most 18% (rmsnorm out), 15% (rstd), 29% (dx), 23% (dweight), 28% (rope) and 13% (rope round trip)
// of their bounds (LMCORE_PRINT_ERRORS=1 prints them). A 1% error in any output is 1e-2 of its magnitude,
// at least three orders above every bound.
#include <gtest/gtest.h>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "lmcore/model/layers.h"
#include "lmcore/model/reference.h"
#include "tests/model/model_test_util.h"

namespace lmcore::model {
namespace {

using testing::expect_close;
using testing::max_abs;
using testing::random_vector;

constexpr double kEps = 1.0 / (1 << 23);  // f32 epsilon (2^-23)

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved_); }

 private:
  int saved_;
};

const std::int64_t kSizes[] = {1, 7, 15, 16, 17, 64, 65, 384, 4097};

TEST(Layers, RmsNormForwardAndBackwardMatchTheReference) {
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    for (std::int64_t C : kSizes) {
      for (std::int64_t N : {std::int64_t{1}, std::int64_t{3}, std::int64_t{37}}) {
        const auto x = random_vector(N * C, 1 + C, 2.0f), w = random_vector(C, 2 + C), dy = random_vector(N * C, 3 + C);
        std::vector<float> out(N * C), rstd(N), out_r(N * C), rstd_r(N);
        rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
        reference::rmsnorm_forward(out_r.data(), rstd_r.data(), x.data(), w.data(), N, C, 1e-5f);
        const std::string tag = "N=" + std::to_string(N) + " C=" + std::to_string(C) + " threads=" + std::to_string(threads);
        expect_close(out, out_r, 4 * kEps * std::sqrt(double(C)) * max_abs(out_r) + 1e-30, "rmsnorm out " + tag);
        expect_close(rstd, rstd_r, 4 * kEps * std::sqrt(double(C)) * max_abs(rstd_r), "rmsnorm rstd " + tag);
        // Backward adds into existing gradients: start both from the same non-zero values.
        auto dx = random_vector(N * C, 4 + C), dw = random_vector(C, 5 + C);
        auto dx_r = dx, dw_r = dw;
        rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd_r.data(), N, C);
        reference::rmsnorm_backward(dx_r.data(), dw_r.data(), dy.data(), x.data(), w.data(), rstd_r.data(), N, C);
        expect_close(dx, dx_r, 8 * kEps * std::sqrt(double(C)) * (max_abs(dx_r) + 1), "rmsnorm dx " + tag);
        expect_close(dw, dw_r, kEps * std::sqrt(double(N * C)) * (max_abs(dw_r) + 1), "rmsnorm dweight " + tag);
      }
    }
  }
}

TEST(Layers, RmsNormWeightGradientIsDeterministicPerThreadCount) {
  const std::int64_t N = 517, C = 96;
  const auto x = random_vector(N * C, 11), w = random_vector(C, 12), dy = random_vector(N * C, 13);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  auto run = [&] {
    std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f);
    rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    return dw;
  };
  ThreadCount tc(2);
  const auto a = run(), b = run();
  EXPECT_EQ(a, b);
}

TEST(Layers, RopeMatchesTheReferenceAndBackwardIsItsTranspose) {
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    for (std::int64_t hd : {2, 6, 16, 32, 64, 130}) {
      const std::int64_t T = 67, N = 2 * T, heads = 3, stride = heads * hd + 5;  // 5 columns after the heads
      const RopeTable table = RopeTable::make(T, hd, 10000.0);
      const auto x0 = random_vector(N * stride, 20 + hd);
      auto x = x0, x_r = x0;
      rope_forward(x.data(), N, T, stride, heads, table);
      reference::rope_forward(x_r.data(), N, T, stride, heads, hd, 10000.0);
      // f32 angles (as Hugging Face computes them) are off by up to t * 2^-24 radians.
      const double bound = (4 * kEps + static_cast<double>(T) * kEps) * max_abs(x0);
      const std::string tag = "hd=" + std::to_string(hd) + " threads=" + std::to_string(threads);
      expect_close(x, x_r, bound, "rope forward " + tag);
      // Columns past the rotated heads are untouched.
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = heads * hd; j < stride; ++j) ASSERT_EQ(x[n * stride + j], x0[n * stride + j]);
      // <R x, y> == <x, R^T y>: the backward is the transpose of the forward.
      const auto y = random_vector(N * stride, 30 + hd);
      auto ry = y;
      rope_backward(ry.data(), N, T, stride, heads, table);
      double lhs = 0, rhs = 0;
      for (std::int64_t i = 0; i < N * stride; ++i) {
        lhs += static_cast<double>(x[i]) * y[i];
        rhs += static_cast<double>(x0[i]) * ry[i];
      }
      EXPECT_NEAR(lhs, rhs, 1e-5 * (std::fabs(lhs) + 1)) << tag;
      auto back = x;
      rope_backward(back.data(), N, T, stride, heads, table);
      expect_close(back, x0, 8 * kEps * max_abs(x0), "rope round trip " + tag);
    }
  }
}

TEST(Layers, SwigluForwardAndBackwardMatchTheReference) {
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    for (std::int64_t F : kSizes) {
      const std::int64_t N = 5;
      auto gu = random_vector(N * 2 * F, 40 + F, 3.0f);
      gu[0] = -150.0f;  // far outside the exp's range: silu -> -0, not NaN
      if (gu.size() > 1) gu[1] = 95.0f;
      const auto dout = random_vector(N * F, 41 + F);
      std::vector<float> out(N * F), out_r(N * F), dgu(N * 2 * F, 7.0f), dgu_r(N * 2 * F);
      swiglu_forward(out.data(), gu.data(), N, F);
      reference::swiglu_forward(out_r.data(), gu.data(), N, F);
      const std::string tag = "F=" + std::to_string(F) + " threads=" + std::to_string(threads);
      // Relative per element: silu and the product round a handful of times.
      for (std::size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], out_r[i], 8 * kEps * std::fabs(out_r[i]) + 1e-30) << tag << " out[" << i << "]";
      swiglu_backward(dgu.data(), dout.data(), gu.data(), N, F);  // overwrites: the 7.0 fill must vanish
      reference::swiglu_backward(dgu_r.data(), dout.data(), gu.data(), N, F);
      // d gate = d * u * s * (1 + g (1 - s)) cancels near g = -1.28 (where silu' = 0): its bound is
      // relative to the size of the two terms, not of their sum.
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t f = 0; f < F; ++f) {
          const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f], d = dout[n * F + f];
          const double s = 1.0 / (1.0 + std::exp(-g));
          const double terms_gate = std::fabs(d * u) * (s + std::fabs(g) * s * (1 - s));
          const std::size_t ig = n * 2 * F + f, iu = ig + F;
          ASSERT_TRUE(std::isfinite(dgu[ig]) && std::isfinite(dgu[iu])) << tag << " dgu[" << ig << "]";
          ASSERT_NEAR(dgu[ig], dgu_r[ig], 16 * kEps * terms_gate + 1e-30) << tag << " d gate[" << ig << "]";
          ASSERT_NEAR(dgu[iu], dgu_r[iu], 16 * kEps * std::fabs(dgu_r[iu]) + 1e-30) << tag << " d up[" << iu << "]";
        }
    }
  }
}

TEST(Layers, EmbeddingBackwardAddsEveryPositionDeterministically) {
  const std::int64_t V = 50, C = 33, N = 300;
  std::vector<std::int32_t> tokens(N);
  for (std::int64_t n = 0; n < N; ++n) tokens[n] = static_cast<std::int32_t>((n * n + 3 * n) % 17);  // repeats
  const auto dout = random_vector(N * C, 50);
  auto dw = random_vector(V * C, 51);
  auto dw_r = dw;
  embedding_backward(dw.data(), dout.data(), tokens.data(), N, C, V);
  reference::embedding_backward(dw_r.data(), dout.data(), tokens.data(), N, C);
  // Same additions in the same (position) order per row: the same bits.
  EXPECT_EQ(dw, dw_r);
  std::vector<float> out(N * C);
  const auto w = random_vector(V * C, 52);
  embedding_forward(out.data(), tokens.data(), w.data(), N, C, V);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < C; ++i) ASSERT_EQ(out[n * C + i], w[tokens[n] * C + i]);
  tokens[7] = 50;
  try {
    embedding_forward(out.data(), tokens.data(), w.data(), N, C, V);
    FAIL() << "expected an error for token 50";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 50 at position 7 is outside [0, 50)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmcore::model
