#include "lmcore/train/adamw.h"

#include <algorithm>
#include <cmath>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "src/train/adamw_kernel.h"

namespace lmcore::train {

void AdamW::validate_options() const {
  LMCORE_CHECK(options_.beta1 >= 0 && options_.beta1 < 1 && options_.beta2 >= 0 && options_.beta2 < 1,
               "AdamW: betas must be in [0, 1), found ({}, {})", options_.beta1, options_.beta2);
  LMCORE_CHECK(options_.eps > 0 && options_.weight_decay >= 0,
               "AdamW: eps must be > 0 and weight_decay >= 0, found {} and {}", options_.eps, options_.weight_decay);
}

// Segments of one piece with one decay setting each; alignment padding between tensors (whose gradients
// are zero) goes with the tensor before it, and a piece's own padding never decays.
void AdamW::add_piece(const model::ParameterLayout& layout, const ShardPiece& piece, std::int64_t local) {
  LMCORE_CHECK(piece.real >= 0 && piece.real <= piece.length && piece.global_begin >= 0 &&
                   piece.global_begin + piece.real <= layout.size(),
               "AdamW: piece [{}, +{}) of length {} is outside the {} parameters", piece.global_begin, piece.real,
               piece.length, layout.size());
  auto push = [&](std::int64_t b, std::int64_t e, bool decay) {
    if (b >= e) return;
    if (!segments_.empty() && segments_.back().decay == decay && segments_.back().end == b) segments_.back().end = e;
    else segments_.push_back({b, e, decay});
  };
  const auto& params = layout.params();
  const std::int64_t g0 = piece.global_begin, g1 = piece.global_begin + piece.real;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::int64_t lo = params[i].offset;
    const std::int64_t hi = i + 1 < params.size() ? params[i + 1].offset : layout.size();
    const std::int64_t a = std::max(lo, g0), b = std::min(hi, g1);
    if (a < b) push(local + a - g0, local + b - g0, params[i].weight_decay);
  }
  push(local + piece.real, local + piece.length, false);
}

AdamW::AdamW(const model::ParameterLayout& layout, const AdamWOptions& options, std::int64_t begin, std::int64_t end)
    : options_(options), begin_(begin) {
  validate_options();
  if (end < 0) end = layout.size();
  LMCORE_CHECK(0 <= begin && begin <= end && end <= layout.size(), "AdamW: slice [{}, {}) is outside the {} parameters",
               begin, end, layout.size());
  size_ = end - begin;
  add_piece(layout, {begin, size_, size_}, 0);
  m_ = Tensor::zeros({size_}, DType::f32);
  v_ = Tensor::zeros({size_}, DType::f32);
}

AdamW::AdamW(const model::ParameterLayout& layout, const AdamWOptions& options, const std::vector<ShardPiece>& pieces)
    : options_(options), begin_(-1) {
  validate_options();
  for (const ShardPiece& p : pieces) {
    add_piece(layout, p, size_);
    size_ += p.length;
  }
  m_ = Tensor::zeros({size_}, DType::f32);
  v_ = Tensor::zeros({size_}, DType::f32);
}

void AdamW::step(float* params, const float* grads, double lr) {
  // torch.optim.AdamW refuses these too; here a NaN would turn every parameter into NaN in one step.
  LMCORE_CHECK(lr >= 0 && std::isfinite(lr), "AdamW: the learning rate must be a finite number >= 0, found {}", lr);
  ++steps_;
  const double t = static_cast<double>(steps_);
  // Scalars as torch forms them: Python floats (f64), used in f32 by the f32 kernels.
  detail::AdamWScalars s{};
  s.decay_scale = static_cast<float>(1.0 - lr * options_.weight_decay);
  s.beta1 = static_cast<float>(options_.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - options_.beta1);
  s.beta2 = static_cast<float>(options_.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - options_.beta2);
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(options_.beta1, t)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  s.eps = static_cast<float>(options_.eps);
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  // One parallel loop over the whole buffer, each chunk doing the parts of the segments it meets: a
  // loop per segment woke the pool once per tensor, most of them a few hundred floats (norm weights).
  parallel_for(0, size_, 16384, [&](std::int64_t lo, std::int64_t hi) {
    for (const Segment& seg : segments_) {
      const std::int64_t a = std::max(lo, seg.begin), b = std::min(hi, seg.end);
      if (a < b) detail::adamw_update(params + a, grads + a, m + a, v + a, b - a, s, seg.decay);
    }
  });
}

}  // namespace lmcore::train
