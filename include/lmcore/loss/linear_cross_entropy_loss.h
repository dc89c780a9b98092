// lmcore/loss/linear_cross_entropy_loss.h — the fused linear cross-entropy as a module that holds the
// projection weight: its own, or one tied to the token embedding.
//
//   // Weight tying: the loss borrows the embedding's weight and gradient buffer, so the embedding's
//   // backward and the loss's backward both add into the same d_weight.
//   auto loss = LinearCrossEntropyLoss::tied(embedding_weight, embedding_grad, options);
//   LossResult r = loss.forward(hidden, target);
//   Tensor d_hidden = loss.backward(Tensor::full({}, 1.0, DType::f32));
//
//   // Owning: the module keeps a private copy of the weight and an f32 gradient buffer.
//   auto head = LinearCrossEntropyLoss::owning(initial_weight, options);
#pragma once

#include "lmcore/core/tensor.h"
#include "lmcore/loss/linear_cross_entropy.h"

namespace lmcore {

class LinearCrossEntropyLoss {
 public:
  // A private copy of `weight` [V, H] and a zeroed f32 gradient of the same shape (plus an f32 [V]
  // bias gradient when options.bias is set).
  static LinearCrossEntropyLoss owning(const Tensor& weight, LossOptions options = {});
  // Shares `weight` [V, H] and adds its gradient into `weight_grad` [V, H] (any float dtype; f32
  // keeps the accumulation in f32 without an extra [V, H] buffer).
  static LinearCrossEntropyLoss tied(Tensor weight, Tensor weight_grad, LossOptions options = {});

  const Tensor& weight() const { return weight_; }
  const Tensor& weight_grad() const { return weight_grad_; }
  const Tensor& bias_grad() const { return bias_grad_; }  // undefined without a bias
  bool owns_weight() const { return owns_; }
  LossOptions& options() { return options_; }
  const LossOptions& options() const { return options_; }

  // Forward; keeps hidden, target and the per-token logsumexp for backward().
  LossResult forward(const Tensor& hidden, const Tensor& target);
  // Backward of the last forward: returns d_hidden and adds into weight_grad (and bias_grad).
  Tensor backward(const Tensor& grad_loss);
  // Forward and backward together (one pass over the vocabulary when a tile spans it).
  LinearCrossEntropyOutput forward_backward(const Tensor& hidden, const Tensor& target, const Tensor& grad_loss);
  // Zeroes weight_grad (and bias_grad), tied or not.
  void zero_grad();

 private:
  LinearCrossEntropyLoss(Tensor weight, Tensor weight_grad, LossOptions options, bool owns);
  Tensor weight_, weight_grad_, bias_grad_;
  LossOptions options_;
  bool owns_ = false;
  Tensor saved_hidden_, saved_target_, saved_lse_;
};

}  // namespace lmcore
