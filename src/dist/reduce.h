// Private: the elementwise combine steps of reductions, for every dtype.
//   combine(out, a, b):  out[i] = a[i] (op) b[i]      (out may alias a or b)
// sum, avg and premul_sum all combine with +; avg divides once at the end (finish_avg) and premul_sum
// scales the local input first (premultiply). Integers wrap on overflow like torch; bool uses
// or (sum, max) and and (product, min). Low-precision floats are computed in f32 and rounded once
// per combine, the same as a rank-ordered fold in torch.
#pragma once

#include <cstdint>

#include "lmcore/core/dtype.h"
#include "lmcore/dist/process_group.h"

namespace lmcore::dist::detail {

void combine(void* out, const void* a, const void* b, std::int64_t n, DType dtype, ReduceOp op);
void finish_avg(void* x, std::int64_t n, DType dtype, int world_size);
void premultiply(void* out, const void* in, std::int64_t n, DType dtype, double factor);
// Why op cannot be applied to dtype, or empty when it can.
std::string reduce_unsupported_reason(DType dtype, ReduceOp op);

}  // namespace lmcore::dist::detail
