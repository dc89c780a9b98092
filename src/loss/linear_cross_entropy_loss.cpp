// LinearCrossEntropyLoss: holds the weight (owned or tied) and the state between forward and backward.
#include "lmcore/loss/linear_cross_entropy_loss.h"

namespace lmcore {

LinearCrossEntropyLoss::LinearCrossEntropyLoss(Tensor weight, Tensor weight_grad, LossOptions options, bool owns)
    : weight_(std::move(weight)), weight_grad_(std::move(weight_grad)), options_(std::move(options)), owns_(owns) {
  LMCORE_CHECK(weight_.defined() && weight_.dim() == 2, "LinearCrossEntropyLoss: weight must be 2-D [V, H], found {}",
               weight_.defined() ? shape_str(weight_.shape()) : std::string("undefined"));
  LMCORE_CHECK(weight_grad_.defined() && weight_grad_.shape() == weight_.shape(),
               "LinearCrossEntropyLoss: weight_grad must have the weight's shape {}, found {}",
               shape_str(weight_.shape()),
               weight_grad_.defined() ? shape_str(weight_grad_.shape()) : std::string("undefined"));
  if (options_.bias.defined()) bias_grad_ = Tensor::zeros(options_.bias.shape(), DType::f32);
}

LinearCrossEntropyLoss LinearCrossEntropyLoss::owning(const Tensor& weight, LossOptions options) {
  LMCORE_CHECK(weight.defined(), "LinearCrossEntropyLoss::owning: weight is undefined");
  return LinearCrossEntropyLoss(weight.clone(), Tensor::zeros(weight.shape(), DType::f32), std::move(options), true);
}

LinearCrossEntropyLoss LinearCrossEntropyLoss::tied(Tensor weight, Tensor weight_grad, LossOptions options) {
  return LinearCrossEntropyLoss(std::move(weight), std::move(weight_grad), std::move(options), false);
}

LossResult LinearCrossEntropyLoss::forward(const Tensor& hidden, const Tensor& target) {
  LossResult r = linear_cross_entropy(hidden, weight_, target, options_);
  saved_hidden_ = hidden;
  saved_target_ = target;
  saved_lse_ = r.lse;
  return r;
}

Tensor LinearCrossEntropyLoss::backward(const Tensor& grad_loss) {
  LMCORE_CHECK(saved_hidden_.defined(), "LinearCrossEntropyLoss::backward: call forward() first");
  Tensor d_hidden = linear_cross_entropy_backward(saved_hidden_, weight_, saved_target_, grad_loss, options_,
                                                  saved_lse_, weight_grad_, bias_grad_);
  saved_hidden_ = saved_target_ = saved_lse_ = Tensor();
  return d_hidden;
}

LinearCrossEntropyOutput LinearCrossEntropyLoss::forward_backward(const Tensor& hidden, const Tensor& target,
                                                                  const Tensor& grad_loss) {
  return linear_cross_entropy_with_grad(hidden, weight_, target, options_, grad_loss, weight_grad_, bias_grad_);
}

void LinearCrossEntropyLoss::zero_grad() {
  weight_grad_.zero_();
  if (bias_grad_.defined()) bias_grad_.zero_();
}

}  // namespace lmcore
