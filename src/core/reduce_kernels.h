// Highway kernels for reductions over a dense run of elements (reduce_kernels.cpp), dispatched at run
// time to the best SIMD target. Each has a plain loop in reduce.cpp's reference to be tested against.
#pragma once

#include <cstdint>

#include "lmcore/core/low_precision.h"

namespace lmcore::detail {

// Sums in f32 (f64 for f64) with vector accumulators over blocks and pairwise combination of blocks,
// so the rounding error grows like log(n).
float reduce_sum_f32(const float* p, std::int64_t n);
float reduce_sum_bf16(const bf16* p, std::int64_t n);
float reduce_sum_f16(const f16* p, std::int64_t n);
double reduce_sum_f64(const double* p, std::int64_t n);

// Max / min that propagate NaN (any NaN in the run gives NaN). n >= 1.
float reduce_max_f32(const float* p, std::int64_t n);
float reduce_min_f32(const float* p, std::int64_t n);
float reduce_max_bf16(const bf16* p, std::int64_t n);
float reduce_min_bf16(const bf16* p, std::int64_t n);

// Sum of exp(p[i] - shift), in f32, pairwise like reduce_sum_f32.
float reduce_sum_exp_f32(const float* p, std::int64_t n, float shift);

}  // namespace lmcore::detail
