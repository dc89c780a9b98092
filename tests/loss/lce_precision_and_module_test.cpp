// bf16 inputs against f32, f32 accumulation of d_weight, the unfused cross-entropy on its own, and
// the LinearCrossEntropyLoss module (owned and tied weights).
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "lmcore/loss/cross_entropy.h"
#include "lmcore/loss/linear_cross_entropy.h"
#include "lmcore/loss/linear_cross_entropy_loss.h"
#include "tests/loss/loss_test_util.h"

namespace lmcore {
namespace {

using test::all_close;
using test::random_targets;
using test::random_tensor;

TEST(LinearCrossEntropyPrecision, Bf16InputsMatchF32OnTheSameValues) {
  const std::int64_t n = 40, h = 64, v = 301;
  // bf16 inputs, and the same values exactly in f32: the only differences left are d_hidden's
  // final rounding to bf16 and GEMM summation order.
  const Tensor hb = random_tensor({n, h}, 1, 1.0, DType::bf16), wb = random_tensor({v, h}, 2, 0.1, DType::bf16);
  const Tensor hf = hb.to(DType::f32), wf = wb.to(DType::f32);
  const Tensor target = random_targets(n, v, 3, 5);
  LossOptions o;
  o.label_smoothing = 0.1;
  o.z_loss = 1e-3;
  o.softcap = 20.0;
  o.class_weight = test::random_uniform({v}, 4, 0.5, 1.5).to(DType::f32);
  o.chunk_size = 64;
  const Tensor g = Tensor::full({}, 1.0, DType::f32);
  Tensor dw_b = Tensor::zeros({v, h}, DType::f32), dw_f = Tensor::zeros({v, h}, DType::f32);
  const auto b = linear_cross_entropy_with_grad(hb, wb, target, o, g, dw_b, Tensor());
  const auto f = linear_cross_entropy_with_grad(hf, wf, target, o, g, dw_f, Tensor());
  EXPECT_EQ(b.d_hidden.dtype(), DType::bf16);
  EXPECT_TRUE(all_close("loss", b.loss, f.loss, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("lse", b.lse, f.lse, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("d_hidden", b.d_hidden, f.d_hidden, 1.0 / 128, 1e-6));  // bf16 has 8 mantissa bits
  EXPECT_TRUE(all_close("d_weight", dw_b, dw_f, 1e-4, 1e-8));

  // And the bf16 result is close to the f64 truth.
  LossOptions o64 = o;
  o64.accumulate = DType::f64;
  Tensor dw_64 = Tensor::zeros({v, h}, DType::f64);
  const auto t = linear_cross_entropy_unfused_with_grad(hb.to(DType::f64), wb.to(DType::f64), target, o64,
                                                        g, dw_64, Tensor());
  EXPECT_TRUE(all_close("loss vs f64", b.loss, t.loss, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("d_weight vs f64", dw_b, dw_64, 1e-4, 1e-7));
}

TEST(LinearCrossEntropyPrecision, Bf16WeightGradientIsSummedInF32AndRoundedOnce) {
  const std::int64_t n = 300, h = 16, v = 50;
  const Tensor hb = random_tensor({n, h}, 11, 1.0, DType::bf16), wb = random_tensor({v, h}, 12, 0.3, DType::bf16);
  const Tensor target = random_targets(n, v, 13);
  LossOptions o;
  o.reduction = Reduction::sum;
  o.chunk_size = 7;
  o.token_tile = 16;  // many token tiles: a bf16 running sum would round at every one of them
  const Tensor g = Tensor::full({}, 1.0, DType::f32);
  const Tensor prior = random_tensor({v, h}, 14, 1.0, DType::bf16);
  Tensor dw_f32 = Tensor::zeros({v, h}, DType::f32);
  Tensor dw_bf16 = prior.clone();
  (void)linear_cross_entropy_with_grad(hb, wb, target, o, g, dw_f32, Tensor());
  (void)linear_cross_entropy_with_grad(hb, wb, target, o, g, dw_bf16, Tensor());
  const auto sum32 = dw_f32.to_vector<float>();
  const auto p = prior.to_vector<float>();
  const auto got = dw_bf16.to_vector<float>();
  for (std::size_t k = 0; k < got.size(); ++k) {
    const float expect = bf16::from_f32(static_cast<float>(double(p[k]) + double(sum32[k]))).to_f32();
    ASSERT_EQ(got[k], expect) << "d_weight[" << k << "]";
  }
}

TEST(LinearCrossEntropyLayout, StridedAndExpandedOperandsMatchContiguousOnes) {
  const std::int64_t n = 9, h = 6, v = 23;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // hidden as a transposed view, weight as a column slice of a wider matrix, one expanded row.
    const Tensor hidden_t = random_tensor({h, n}, 51, 1.0, dtype).transpose(0, 1);
    const Tensor weight_wide = random_tensor({v, h + 3}, 52, 0.5, dtype).narrow(1, 2, h);
    const Tensor row = random_tensor({1, h}, 53, 1.0, dtype).expand({n, h});
    const Tensor target = random_targets(n, v, 54, 4);
    LossOptions o;
    o.accumulate = dtype;
    o.label_smoothing = 0.1;
    o.chunk_size = 5;
    const Tensor g = Tensor::full({}, 1.0, dtype);
    for (const Tensor& hidden : {hidden_t, row}) {
      Tensor dw_strided = Tensor::zeros({h, v}, dtype).transpose(0, 1);  // d_weight as a transposed view
      Tensor dw_dense = Tensor::zeros({v, h}, dtype);
      const auto a = linear_cross_entropy_with_grad(hidden, weight_wide, target, o, g, dw_strided, Tensor());
      const auto b = linear_cross_entropy_with_grad(hidden.contiguous(), weight_wide.contiguous(), target, o, g,
                                                    dw_dense, Tensor());
      EXPECT_TRUE(all_close("loss", a.loss, b.loss, 1e-6, 1e-7));
      EXPECT_TRUE(all_close("d_hidden", a.d_hidden, b.d_hidden, 1e-5, 1e-7));
      EXPECT_TRUE(all_close("d_weight", dw_strided, dw_dense, 1e-5, 1e-7));
    }
  }
}

TEST(CrossEntropy, MatchesDirectFormulaAndBackwardOfItsOwnForward) {
  const std::int64_t n = 7, v = 9;
  const Tensor logits = random_tensor({n, v}, 21, 2.0);
  const Tensor target = random_targets(n, v, 22, 3);
  LossOptions o;
  o.accumulate = DType::f64;
  o.reduction = Reduction::none;
  const LossResult r = cross_entropy(logits, target, o);
  const auto z = logits.to_vector<double>();
  const auto t = target.to_vector<std::int64_t>();
  const auto loss = r.loss.to_vector<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (std::int64_t j = 0; j < v; ++j) s += std::exp(z[i * v + j]);
    const double expect = t[i] == -100 ? 0.0 : std::log(s) - z[i * v + t[i]];
    EXPECT_NEAR(loss[i], expect, 1e-12) << "token " << i;
  }
  // Backward of none with g_i: softmax - onehot, scaled, zero rows for ignored tokens.
  const Tensor g = random_tensor({n}, 23);
  const Tensor d = cross_entropy_backward(logits, target, g, o);
  const auto dv = d.to_vector<double>();
  const auto gv = g.to_vector<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (std::int64_t j = 0; j < v; ++j) s += std::exp(z[i * v + j]);
    for (std::int64_t j = 0; j < v; ++j) {
      const double expect = t[i] == -100 ? 0.0 : gv[i] * (std::exp(z[i * v + j]) / s - (j == t[i] ? 1.0 : 0.0));
      EXPECT_NEAR(dv[i * v + j], expect, 1e-12) << i << "," << j;
    }
  }
}

TEST(LinearCrossEntropyLoss, TiedWeightReceivesBothGradients) {
  const std::int64_t n = 12, h = 5, v = 17;
  const Tensor hidden = random_tensor({n, h}, 31, 1.0, DType::f32);
  const Tensor weight = random_tensor({v, h}, 32, 0.5, DType::f32);
  const Tensor target = random_targets(n, v, 33);
  // The embedding's backward has already put its gradient into the shared buffer.
  const Tensor embedding_grad = random_tensor({v, h}, 34, 1.0, DType::f32);
  Tensor shared_grad = embedding_grad.clone();
  LossOptions o;
  o.label_smoothing = 0.05;
  auto loss = LinearCrossEntropyLoss::tied(weight, shared_grad, o);
  EXPECT_FALSE(loss.owns_weight());
  EXPECT_EQ(loss.weight().storage(), weight.storage());
  const LossResult r = loss.forward(hidden, target);
  const Tensor dh = loss.backward(Tensor::full({}, 1.0, DType::f32));

  Tensor dw_alone = Tensor::zeros({v, h}, DType::f32);
  const auto ref = linear_cross_entropy_with_grad(hidden, weight, target, o, Tensor::full({}, 1.0, DType::f32),
                                                  dw_alone, Tensor());
  EXPECT_TRUE(all_close("loss", r.loss, ref.loss, 1e-6, 1e-7));
  EXPECT_TRUE(all_close("d_hidden", dh, ref.d_hidden, 1e-5, 1e-7));
  const auto e = embedding_grad.to_vector<float>(), a = dw_alone.to_vector<float>();
  std::vector<float> both(e.size());
  for (std::size_t k = 0; k < e.size(); ++k) both[k] = e[k] + a[k];
  EXPECT_TRUE(all_close("shared d_weight", shared_grad, Tensor::from_vector(both, {v, h}), 1e-5, 1e-6));
  EXPECT_THROW((void)loss.backward(Tensor::full({}, 1.0, DType::f32)), Error);  // no saved forward
}

TEST(LinearCrossEntropyLoss, OwningKeepsAPrivateWeightAndBiasGradient) {
  const std::int64_t n = 6, h = 4, v = 9;
  Tensor weight = random_tensor({v, h}, 41, 0.5, DType::f32);
  const Tensor hidden = random_tensor({n, h}, 42, 1.0, DType::f32);
  const Tensor target = random_targets(n, v, 43);
  LossOptions o;
  o.bias = random_tensor({v}, 44, 0.1, DType::f32);
  auto loss = LinearCrossEntropyLoss::owning(weight, o);
  EXPECT_TRUE(loss.owns_weight());
  EXPECT_NE(loss.weight().storage(), weight.storage());
  const auto out = loss.forward_backward(hidden, target, Tensor::full({}, 1.0, DType::f32));
  Tensor dw = Tensor::zeros({v, h}, DType::f32), db = Tensor::zeros({v}, DType::f32);
  const auto ref = linear_cross_entropy_unfused_with_grad(hidden, weight, target, o, Tensor::full({}, 1.0, DType::f32),
                                                          dw, db);
  EXPECT_TRUE(all_close("loss", out.loss, ref.loss, 1e-6, 1e-7));
  EXPECT_TRUE(all_close("d_weight", loss.weight_grad(), dw, 1e-5, 1e-7));
  EXPECT_TRUE(all_close("d_bias", loss.bias_grad(), db, 1e-5, 1e-7));
  weight.fill_(0.0);  // the module's copy is unaffected
  EXPECT_TRUE(all_close("loss after caller changes its tensor", loss.forward(hidden, target).loss, ref.loss, 1e-6,
                        1e-7));
  loss.zero_grad();
  for (float x : loss.weight_grad().to_vector<float>()) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace lmcore
