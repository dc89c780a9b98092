// Private: the model's matrix products. C is always f32 (activations that feed element-wise layers and
// f32 gradient accumulators); A and B are in the compute dtype (f32, or bf16 with f32 accumulation).
#pragma once

#include <cstdint>

#include "lmcore/core/dtype.h"

namespace lmcore::model::detail {

// Row-major C[M, N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T; lda/ldb/ldc are row strides.
void gemm(DType compute, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

}  // namespace lmcore::model::detail
