// Private: the per-row vector loops of the attention kernels (max, exp, softmax gradient), compiled
// for every SIMD target with Highway and dispatched at run time. The library is built without
// -march flags, so these hand-vectorised loops (AVX2/AVX-512 exp) are what keeps the softmax from
// costing more than the two sgemm tiles it sits between.
#pragma once

#include <cstdint>

namespace lmcore::attention::detail {

// max_j x[j] (-inf when n == 0 or every x is -inf).
float row_max(const float* x, std::int64_t n);
// x[j] = exp(x[j] - m) for finite m (exp(-inf) = 0); returns the sum of the new x.
float row_exp_sum(float* x, std::int64_t n, float m);
// x[j] = exp(x[j] - m), no sum.
void row_exp(float* x, std::int64_t n, float m);
// ds[j] = p[j] * (dp[j] - delta) (ds may alias dp).
void row_softmax_grad(float* ds, const float* p, const float* dp, std::int64_t n, float delta);
// x[j] *= a.
void row_scale(float* x, std::int64_t n, float a);
// x[j] = mask[j] ? x[j] : -inf.
void row_apply_mask(float* x, const std::uint8_t* mask, std::int64_t n);

}  // namespace lmcore::attention::detail
