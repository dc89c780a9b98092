// lmcore/codegen/reference.h — plain scalar twins of the generated kernels, for the tests. They share no
// code with the generated or generic kernels: one loop per formula, f64 accumulation, single-threaded,
// their own bf16 rounding. bf16 buffers are uint16_t bit patterns; shapes as in rmsnorm.h.
#pragma once

#include <cstdint>

#include "lmcore/codegen/spec.h"

namespace lmcore::codegen::reference {

// bf16 bits <-> value; to_bf16 rounds to nearest even (ties to even), NaN -> 0xFFFF.
double from_bf16(std::uint16_t bits);
std::uint16_t to_bf16(double v);

// out (N, C) written as f64 BEFORE the rounding to the out dtype (tests bound that rounding separately),
// rstd (N) f64, residual_out (N, C) in the io dtype (rounded, as the kernel must store it).
void rmsnorm_forward(double* out, double* rstd, void* residual_out, const void* inp, const void* residual,
                     const float* weight, std::int64_t N, const RmsNormSpec& spec);
// dinp (N, C) f64 = dinp_in (io dtype) + gradient, before rounding; dweight (C) f64 = dweight_in + gradient.
// rstd as given (the kernel's), x = inp.
void rmsnorm_backward(double* dinp, double* dweight, const void* dinp_in, const float* dweight_in, const void* dout,
                      const void* inp, const float* weight, const float* rstd, std::int64_t N,
                      const RmsNormSpec& spec);

// C (M, spec.out_cols()) and P (M, NB) in f64 for dense operands: a (M, K), b (NB, K) when spec.b_trans
// else (K, NB), bias (NB), residual (M, N), aux (M, 2N) gate | up for dswiglu. silu(x) = x / (1 + e^-x),
// gelu = the tanh form; dswiglu: C = [P u s (1 + g (1 - s)), P g s], s = 1 / (1 + e^-g).
void gemm_epilogue(double* c, double* pre, const float* a, const float* b, const float* bias, const float* residual,
                   std::int64_t M, const GemmSpec& spec, const float* aux = nullptr);

}  // namespace lmcore::codegen::reference
