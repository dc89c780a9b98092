// The GEMM rate the model's matrix products reach on this machine now: the denominator of the model
// FLOPs utilisation that `lmcore train` and `lmcore bench train` report. Measured through the same path
// the layers use (f32: sgemm cut over lmcore's pool; bf16: gemm_lowp), so MFU compares like with like.
#pragma once

#include "lmcore/core/dtype.h"

namespace lmcore::model {

// Best GFLOPS of n x n x n products over about `budget_seconds` after a warm-up.
double gemm_peak_gflops(DType compute, std::int64_t n = 1024, double budget_seconds = 0.5);

}  // namespace lmcore::model
