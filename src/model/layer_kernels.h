// Private: Highway row kernels of the model's layers (layer_kernels.cpp), compiled once per SIMD target
// and dispatched at run time. layers.cpp cuts the rows over threads; lmcore/model/reference.h holds the
// scalar twins the tests compare against.
#pragma once

#include <cstdint>

namespace lmcore::model::detail {

// out = x * rstd * w over one row of C; returns rstd = 1 / sqrt(mean(x^2) + eps).
float rmsnorm_row(float* out, const float* x, const float* w, std::int64_t C, float eps);
// One row: dx += rstd * (w * dy) - rstd^3 / C * x * sum(w * dy * x);  dw += dy * x * rstd.
void rmsnorm_backward_row(float* dx, float* dw, const float* dy, const float* x, const float* w, float rstd,
                          std::int64_t C);
// One head: (x1, x2) -> (x1 c - s x2 * sign... ) with sign = +1 (forward) or -1 (backward, rotation by -angle).
void rope_head(float* x, const float* cos, const float* sin, std::int64_t half, float sign);
// out = silu(g) * u over n values.
void swiglu_row(float* out, const float* g, const float* u, std::int64_t n);
// dg = dout * u * silu'(g), du = dout * silu(g).
void swiglu_backward_row(float* dg, float* du, const float* dout, const float* g, const float* u, std::int64_t n);
// dst += src over n values.
void add_row(float* dst, const float* src, std::int64_t n);
// sum of x^2 over n values, accumulated in f64.
double sum_squares_f64(const float* x, std::int64_t n);

}  // namespace lmcore::model::detail
