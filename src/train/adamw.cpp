#include "lmcore/train/adamw.h"

#include <algorithm>
#include <cmath>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"

namespace lmcore::train {

AdamW::AdamW(const model::ParameterLayout& layout, const AdamWOptions& options, std::int64_t begin, std::int64_t end)
    : options_(options), begin_(begin), end_(end < 0 ? layout.size() : end) {
  LMCORE_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= layout.size(),
               "AdamW: slice [{}, {}) is outside the {} parameters", begin_, end_, layout.size());
  LMCORE_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
               "AdamW: betas must be in [0, 1), found ({}, {})", options.beta1, options.beta2);
  LMCORE_CHECK(options.eps > 0 && options.weight_decay >= 0, "AdamW: eps must be > 0 and weight_decay >= 0, found {} and {}",
               options.eps, options.weight_decay);
  // Segments of the slice with one decay setting each; alignment padding between tensors (whose
  // gradients are zero) goes with the tensor before it.
  const auto& params = layout.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::int64_t lo = params[i].offset;
    const std::int64_t hi = i + 1 < params.size() ? params[i + 1].offset : layout.size();
    const std::int64_t a = std::max(lo, begin_), b = std::min(hi, end_);
    if (a >= b) continue;
    if (!segments_.empty() && segments_.back().decay == params[i].weight_decay && segments_.back().end == a - begin_)
      segments_.back().end = b - begin_;
    else
      segments_.push_back({a - begin_, b - begin_, params[i].weight_decay});
  }
  m_ = Tensor::zeros({size()}, DType::f32);
  v_ = Tensor::zeros({size()}, DType::f32);
}

void AdamW::step(float* params, const float* grads, double lr) {
  ++steps_;
  const double t = static_cast<double>(steps_);
  // Scalars as torch forms them: Python floats (f64), used in f32 by the f32 kernels.
  const float decay_scale = static_cast<float>(1.0 - lr * options_.weight_decay);
  const float b1 = static_cast<float>(options_.beta1), one_minus_b1 = static_cast<float>(1.0 - options_.beta1);
  const float b2 = static_cast<float>(options_.beta2), one_minus_b2 = static_cast<float>(1.0 - options_.beta2);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(options_.beta1, t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  const float eps = static_cast<float>(options_.eps);
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (const Segment& s : segments_) {
    parallel_for(s.begin, s.end, 16384, [&](std::int64_t lo, std::int64_t hi) {
      if (s.decay)
        for (std::int64_t i = lo; i < hi; ++i) params[i] *= decay_scale;
      for (std::int64_t i = lo; i < hi; ++i) {
        const float g = grads[i];
        m[i] = m[i] * b1 + g * one_minus_b1;
        v[i] = v[i] * b2 + one_minus_b2 * g * g;
        const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
        params[i] = params[i] + -step_size * (m[i] / denom);
      }
    });
  }
}

double grad_norm_squared(const float* grads, std::int64_t n) {
  // Fixed chunks of 64K summed in f64, then the chunk sums in order: deterministic for any thread count.
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> sums(static_cast<std::size_t>(chunks), 0.0);
  parallel_for(0, chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      double s = 0;
      const std::int64_t hi = std::min(n, (c + 1) * kChunk);
      for (std::int64_t i = c * kChunk; i < hi; ++i) s += static_cast<double>(grads[i]) * grads[i];
      sums[static_cast<std::size_t>(c)] = s;
    }
  });
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

double clip_grad_norm(float* grads, std::int64_t n, double norm, double max_norm) {
  if (!(max_norm > 0)) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  if (!(coef < 1.0)) return 1.0;
  const float c = static_cast<float>(coef);
  parallel_for(0, n, 65536, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) grads[i] *= c;
  });
  return coef;
}

}  // namespace lmcore::train
