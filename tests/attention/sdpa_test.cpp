#include "lmcore/attention/sdpa.h"

#include <gtest/gtest.h>

#include "lmcore/attention/reference.h"
#include "tests/attention/test_util.h"

namespace lmcore::attention {
namespace {

using testing::Bound;
using testing::close_within;
using testing::random_tensor;

// f32 bounds in units of eps = 2^-23 (|diff| <= eps (a max|want| + r |want|)), as in flex_attention_test.cpp.
// Measured (LMCORE_TEST_REPORT_ERRORS=1): out 2.8, lse 0.7, dq/dk/dv 2.9 eps max|want|. Before: 2e-5 +
// 2e-5 |want| (out), 1e-4 + 1e-5 |want| (lse), 5e-5 + 5e-5 |want| (grads).
// out gets the gradients' bound: it averages values up to ~3x max|out| (4.6 measured through Python).
constexpr Bound kOut{16, 0}, kLse{4, 0}, kGrad{16, 0};

void check(const std::string& name, const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o,
           const MaskMod& as_mask) {
  // f32 inputs or f64 ones (the f64 kernels: results, lse and gradients in f64, bounds in f64 epsilons).
  const DType dt = q.dtype();
  const Tensor g = random_tensor(Shape{q.size(0), q.size(1), q.size(2), v.size(3)}, 77, dt);
  const SdpaResult r = sdpa(q, k, v, o);
  ASSERT_EQ(r.out.dtype(), dt);
  ASSERT_EQ(r.lse.dtype(), dt);
  const FlexResult ref = attention_reference(q, k, v, as_mask);
  EXPECT_TRUE(close_within(name + " out", r.out, ref.out, dt, kOut));
  EXPECT_TRUE(close_within(name + " lse", r.lse, ref.lse, dt, kLse));
  const FlexGrads gr = sdpa_backward(q, k, v, r.out, r.lse, g, o);
  ASSERT_EQ(gr.dq.dtype(), dt);
  const FlexGrads want = attention_backward_reference(q, k, v, g, as_mask);
  EXPECT_TRUE(close_within(name + " dq", gr.dq, want.dq, dt, kGrad));
  EXPECT_TRUE(close_within(name + " dk", gr.dk, want.dk, dt, kGrad));
  EXPECT_TRUE(close_within(name + " dv", gr.dv, want.dv, dt, kGrad));
}

TEST(Sdpa, DenseCausalAndExplicitMask) {
  const Tensor q = random_tensor({2, 4, 45, 16}, 1), k = random_tensor({2, 2, 70, 16}, 2),
               v = random_tensor({2, 2, 70, 8}, 3);
  SdpaOptions dense;
  dense.block = 16;
  check("sdpa dense", q, k, v, dense, MaskMod::all());
  SdpaOptions causal = dense;
  causal.causal = true;
  check("sdpa causal", q, k, v, causal, MaskMod::causal());
  // An explicit [L, S] mask with an empty row.
  std::vector<std::uint8_t> bits(45 * 70);
  for (std::int64_t i = 0; i < 45; ++i)
    for (std::int64_t j = 0; j < 70; ++j) bits[static_cast<std::size_t>(i * 70 + j)] = i != 3 && (i * j) % 7 != 1;
  const Tensor m = Tensor::from_vector(bits, {45, 70}).view_as_dtype(DType::boolean);
  SdpaOptions masked = dense;
  masked.attn_mask = m;
  check("sdpa masked", q, k, v, masked, MaskMod::from_tensor(m));
}

TEST(Sdpa, F64DenseAndCausal) {
  // f32-representable values in f64: any f32 step in the f64 path would still miss the f64 bounds by ~1e8.
  const Tensor q = random_tensor({1, 4, 45, 16}, 4, DType::f64), k = random_tensor({1, 2, 70, 16}, 5, DType::f64),
               v = random_tensor({1, 2, 70, 8}, 6, DType::f64);
  SdpaOptions dense;
  dense.block = 16;
  check("sdpa f64 dense", q, k, v, dense, MaskMod::all());
  SdpaOptions causal = dense;
  causal.causal = true;
  check("sdpa f64 causal", q, k, v, causal, MaskMod::causal());
}

TEST(Sdpa, Validation) {
  const Tensor q = random_tensor({1, 1, 8, 4}, 1);
  SdpaOptions both;
  both.causal = true;
  both.attn_mask = Tensor::zeros({8, 8}, DType::boolean);
  EXPECT_THROW(sdpa(q, q, q, both), Error);
  SdpaOptions bad;
  bad.attn_mask = Tensor::zeros({7, 8}, DType::boolean);
  EXPECT_THROW(sdpa(q, q, q, bad), Error);
  SdpaOptions f;
  f.attn_mask = Tensor::zeros({8, 8}, DType::f32);
  EXPECT_THROW(sdpa(q, q, q, f), Error);
}

}  // namespace
}  // namespace lmcore::attention
