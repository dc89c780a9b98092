// Private: the per-token vector loops only the f32 losses need (the two forms of the gradient of
// cross-entropy in its logits), compiled for every SIMD target with Highway and dispatched at run time.
// The softmax itself (max, exp-sums, weighted sums) uses the row kernels attention uses too, with their
// NaN rule (lmcore/core/internal/row_kernels.h): a NaN logit makes its token's lse, loss and gradient
// NaN. f64 keeps the scalar loops of loss_common.h.
#pragma once

#include <cstdint>

#include "lmcore/core/internal/row_kernels.h"

namespace lmcore::loss_detail {

// The shared kernels under the names the loss code uses.
inline float row_max_f32(const float* x, std::int64_t n) { return internal::row_max(x, n); }
inline float row_exp_sum_f32(const float* x, std::int64_t n, float m) { return internal::row_exp_sum(x, n, m); }
inline float row_exp_store_sum_f32(float* x, std::int64_t n, float m) { return internal::row_exp_store_sum(x, n, m); }
inline float row_weighted_sum_f32(const float* x, const float* w, std::int64_t n) { return internal::row_dot(x, w, n); }

// x[j] = exp(x[j] - lse) * a - bw * (w ? w[j] : 1): d loss / d logit of one token from its logits.
// NaN in x or lse gives NaN (the NaN rule; Highway's exp alone would give 0).
void row_softmax_grad_f32(float* x, std::int64_t n, float lse, float a, float bw, const float* w);
// x[j] = x[j] * scale - bw * (w ? w[j] : 1): the same from x = exp(z - m), with scale = a / sum.
void row_scaled_grad_f32(float* x, std::int64_t n, float scale, float bw, const float* w);

}  // namespace lmcore::loss_detail
