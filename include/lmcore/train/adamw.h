// lmcore/train/adamw.h — AdamW with decoupled weight decay over a flat f32 parameter buffer.
//
// The update is torch.optim.AdamW's (1.13, single-tensor path), step by step and in the same order:
//   p *= 1 - lr * wd                          (only where weight decay applies)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g * g
//   p += -(lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Weight decay follows the parameter groups of ParamSpec::weight_decay (none on norms and embeddings
// by default). The optimizer may cover a slice [begin, end) of the flat buffer, or a list of pieces
// (one rank's shard of every unit in sharded training, with padding); its state is then theirs.
//
//   AdamW opt(layout, {.weight_decay = 0.1});
//   opt.step(params, grads, lr);   // params, grads: the slice's floats
#pragma once

#include <cstdint>
#include <vector>

#include "lmcore/core/tensor.h"
#include "lmcore/model/grad_norm.h"
#include "lmcore/model/parameters.h"

namespace lmcore::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

using model::ShardPiece;

class AdamW {
 public:
  // Covers the whole flat buffer, or [begin, end) of it.
  AdamW(const model::ParameterLayout& layout, const AdamWOptions& options, std::int64_t begin = 0,
        std::int64_t end = -1);
  // Covers the pieces, laid out one after another in the local buffer.
  AdamW(const model::ParameterLayout& layout, const AdamWOptions& options, const std::vector<ShardPiece>& pieces);

  // One update of params[0, size()) from grads[0, size()) (the covered slice), multithreaded.
  void step(float* params, const float* grads, double lr);

  std::int64_t size() const { return size_; }
  // The first global element when the optimizer covers one contiguous slice (else -1).
  std::int64_t begin() const { return begin_; }
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t s) { steps_ = s; }
  // f32 [size()]: the first and second moments.
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  const Tensor& exp_avg() const { return m_; }
  const Tensor& exp_avg_sq() const { return v_; }
  const AdamWOptions& options() const { return options_; }

 private:
  struct Segment {
    std::int64_t begin, end;  // in the local buffer
    bool decay;
  };
  void add_piece(const model::ParameterLayout& layout, const ShardPiece& piece, std::int64_t local);
  void validate_options() const;
  AdamWOptions options_;
  std::int64_t begin_ = 0, size_ = 0, steps_ = 0;
  std::vector<Segment> segments_;
  Tensor m_, v_;
};

using model::clip_grad_norm;
using model::grad_norm_squared;

}  // namespace lmcore::train
