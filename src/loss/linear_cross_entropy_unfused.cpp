// The unfused linear cross-entropy: logits = hidden @ weight^T (+ bias) as a full [N, V] tensor, then
// cross_entropy, then d_logits [N, V] and two matmuls. The reference the fused path is tested
// against and the baseline `lmcore bench lce` compares with.
#include <algorithm>

#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/loss/linear_cross_entropy.h"
#include "src/loss/loss_common.h"

namespace lmcore {

namespace {

void check_linear(const char* op, const Tensor& hidden, const Tensor& weight) {
  LMCORE_CHECK(hidden.defined() && weight.defined(), "{}: hidden and weight must be defined", op);
  LMCORE_CHECK(hidden.dim() == 2, "{}: hidden must be 2-D [N, H], found {}", op, shape_str(hidden.shape()));
  LMCORE_CHECK(weight.dim() == 2 && weight.size(1) == hidden.size(1),
               "{}: weight must be [V, {}] for hidden {}, found {}", op, hidden.size(1), shape_str(hidden.shape()),
               shape_str(weight.shape()));
  LMCORE_CHECK(hidden.dtype() == weight.dtype(), "{}: hidden is {} but weight is {}: expected the same dtype", op,
               hidden.dtype(), weight.dtype());
}

// logits [N, V] = hidden @ weight^T + bias, in the input dtype (bias added in f64 and rounded once).
Tensor logits_of(const char* op, const Tensor& hidden, const Tensor& weight, const LossOptions& options) {
  Tensor logits = matmul(hidden, weight.transpose(0, 1));
  if (options.bias.defined()) {
    LMCORE_CHECK(options.bias.dim() == 1 && options.bias.size(0) == weight.size(0),
                 "{}: bias must have shape [{}] (V), found {}", op, weight.size(0), shape_str(options.bias.shape()));
    loss_detail::add_into(logits, options.bias.unsqueeze(0).expand(logits.shape()), op);
  }
  return logits;
}

// Column sums of d_logits [N, V] into a new [V] f64 tensor.
Tensor column_sums(const Tensor& dlogits) {
  const std::int64_t n = dlogits.size(0), v = dlogits.size(1);
  Tensor out = Tensor::zeros({v}, DType::f64);
  double* o = out.data<double>();
  visit_dtype(dlogits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      const T* p = dlogits.data<T>();
      parallel_for(0, v, 256, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = lo; j < hi; ++j) o[j] += static_cast<double>(load_as_compute(p[i * v + j]));
      });
    }
  });
  return out;
}

}  // namespace

LossResult linear_cross_entropy_unfused(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                        const LossOptions& options) {
  const char* op = "linear_cross_entropy_unfused";
  check_linear(op, hidden, weight);
  return cross_entropy(logits_of(op, hidden, weight, options), target, options);
}

LinearCrossEntropyOutput linear_cross_entropy_unfused_with_grad(const Tensor& hidden, const Tensor& weight,
                                                                const Tensor& target, const LossOptions& options,
                                                                const Tensor& grad_loss, Tensor d_weight,
                                                                Tensor d_bias) {
  const char* op = "linear_cross_entropy_unfused_with_grad";
  check_linear(op, hidden, weight);
  Tensor logits = logits_of(op, hidden, weight, options);
  LossResult r = cross_entropy(logits, target, options);
  Tensor dlogits = cross_entropy_backward(logits, target, grad_loss, options, r.lse);
  logits = Tensor();  // autograd frees the logits once the loss backward has used them
  LinearCrossEntropyOutput out{r.loss, r.z_loss, r.lse, matmul(dlogits, weight)};
  if (d_weight.defined()) loss_detail::add_into(d_weight, matmul(dlogits.transpose(0, 1), hidden), op);
  if (d_bias.defined()) loss_detail::add_into(d_bias, column_sums(dlogits), op);
  return out;
}

}  // namespace lmcore
