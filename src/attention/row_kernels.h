// Private: the per-row vector loops only attention needs (the softmax gradient, the mask), compiled
// for every SIMD target with Highway and dispatched at run time. The softmax itself (max, exp, sums,
// scale) uses the row kernels the losses use too, with their NaN rule: lmcore/core/internal/row_kernels.h.
#pragma once

#include <cstdint>

#include "lmcore/core/internal/row_kernels.h"

namespace lmcore::attention::detail {

using internal::max_nan;
using internal::row_exp;
using internal::row_exp_sum_store_bf16;
using internal::row_exp_store_sum;
using internal::row_max;
using internal::row_scale;

// ds[j] = p[j] * (dp[j] - delta) (ds may alias dp). NaN in p, dp or delta gives NaN.
void row_softmax_grad(float* ds, const float* p, const float* dp, std::int64_t n, float delta);
// x[j] = mask[j] ? x[j] : -inf (a masked NaN becomes -inf: masked scores are never read).
void row_apply_mask(float* x, const std::uint8_t* mask, std::int64_t n);

}  // namespace lmcore::attention::detail
