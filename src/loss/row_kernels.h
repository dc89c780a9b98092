// Private: the per-token vector loops of the f32 losses (max, exp-sums, weighted sums, the softmax
// gradient), compiled for every SIMD target with Highway and dispatched at run time. The library is
// built without -march flags, so without these the two passes over each [tokens x vocab] tile run
// scalar libm exp and cost a large share of the GEMMs around them. f64 keeps the scalar loops of
// loss_common.h, which are also the reference these are tested against.
//
// Conventions shared by every function: n >= 0; NaN in x propagates into max and sums; exp of an
// argument below about -104 is 0 (so exp(-inf) = 0).
#pragma once

#include <cstdint>

namespace lmcore::loss_detail {

// max_j x[j]: -inf when n == 0, NaN when any x[j] is NaN.
float row_max_f32(const float* x, std::int64_t n);
// sum_j exp(x[j] - m), x unchanged.
float row_exp_sum_f32(const float* x, std::int64_t n, float m);
// x[j] = exp(x[j] - m); returns the sum of the new x.
float row_exp_store_sum_f32(float* x, std::int64_t n, float m);
// sum_j x[j] when w is null, else sum_j w[j] * x[j].
float row_weighted_sum_f32(const float* x, const float* w, std::int64_t n);
// x[j] = exp(x[j] - lse) * a - bw * (w ? w[j] : 1): d loss / d logit of one token from its logits.
void row_softmax_grad_f32(float* x, std::int64_t n, float lse, float a, float bw, const float* w);
// x[j] = x[j] * scale - bw * (w ? w[j] : 1): the same from x = exp(z - m), with scale = a / sum.
void row_scaled_grad_f32(float* x, std::int64_t n, float scale, float bw, const float* w);

}  // namespace lmcore::loss_detail
