// lmcore/core/internal/row_kernels.h — the f32 row loops of every softmax in lmcore (flex attention,
// sdpa, the cross-entropy losses): max, exp with a sum, scale, sum and dot, one Highway copy per SIMD
// target dispatched at run time (src/core/row_kernels.cpp). The library is built without -march
// flags; these hand-vectorised loops (Highway's exp on AVX2 / AVX-512) are what keep a softmax from
// costing more than the GEMM tiles around it. Not public API: the parts above core share them so that
// attention and the losses round, and treat NaN, alike.
//
//   float m = row_max(x, n);                  // NaN when any x[j] is NaN
//   float s = row_exp_store_sum(x, n, m);     // x[j] = exp(x[j] - m), s = sum of them
//
// The NaN rule, the same in every function and every caller: NaN propagates. row_max returns NaN
// when any x[j] is NaN (x86 max instructions drop a NaN operand, so this is checked, not inherited);
// exp of NaN is NaN, so every sum over a row holding a NaN, or taken with m = NaN, is NaN. A softmax
// row with a NaN input therefore gives NaN (probabilities, logsumexp, loss), as torch does, and never
// a finite value that hides it. Callers that fold a row max into a running max use max_nan(), not
// std::max (which returns its first argument when the second is NaN).
//
// Infinities: row_max of an empty row, or of a row of -inf, is -inf. exp(-inf - m) = 0 for any m
// that is not -inf, so masked (-inf) entries add nothing; m = -inf itself gives exp(-inf + inf) =
// NaN, and callers treat an all-masked row on its own (attention: out = 0, lse = -inf). A +inf entry
// gives exp(inf - inf) = NaN, again as in torch. Arguments below about -87 give 0 or a denormal,
// never a negative or garbage value. exp is Highway's, within 2 ulp of the true value for arguments in
// [-87, 88] (measured in tests/core/row_kernels_test.cpp).
//
// n >= 0 everywhere; pointers need no alignment; x may be any float array of n elements.
#pragma once

#include <cmath>
#include <cstdint>

#include "lmcore/core/low_precision.h"

namespace lmcore::internal {

// max(a, b) that returns NaN when either is NaN.
inline float max_nan(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : (a < b ? b : a); }

// max_j x[j]: -inf when n == 0, NaN when any x[j] is NaN.
float row_max(const float* x, std::int64_t n);
// sum_j exp(x[j] - m); x unchanged.
float row_exp_sum(const float* x, std::int64_t n, float m);
// x[j] = exp(x[j] - m); returns their sum.
float row_exp_store_sum(float* x, std::int64_t n, float m);
// p[j] = exp(x[j] - m) rounded to bf16 (to nearest even; NaN stays NaN: cast_f32_to_lowp's rounding),
// x unchanged; returns the sum of the unrounded exps, the same value and bits as row_exp_store_sum.
// The softmax of a bf16 matrix-unit product (flex attention's P) in one pass.
float row_exp_sum_store_bf16(const float* x, bf16* p, std::int64_t n, float m);
// x[j] = exp(x[j] - m), no sum.
void row_exp(float* x, std::int64_t n, float m);
// x[j] *= a.
void row_scale(float* x, std::int64_t n, float a);
// sum_j x[j] when w is null, else sum_j w[j] x[j].
float row_dot(const float* x, const float* w, std::int64_t n);

}  // namespace lmcore::internal
