// lmcore/core/reduce.h — reductions over one or several dims: sum, mean, amax, amin, logsumexp,
// argmax, argmin.
//
//   Tensor x = ...;                                   // bf16 [B, T, C]
//   Tensor s = sum(x, {-1});                          // bf16 [B, T], accumulated in f32
//   Tensor m = mean(x, {0, 1}, /*keepdim=*/true);     // bf16 [1, 1, C]
//   Tensor i = argmax(x, 2);                          // i64 [B, T]
//
// Semantics follow torch 1.13:
//  * `dims` empty means every dim; dims may be negative; a dim listed twice is an error.
//  * Output dtypes: sum of bool/integers is i64, otherwise the input dtype; mean and logsumexp need
//    a floating input (logsumexp of bool/integers gives f32, as torch); amax/amin keep the dtype;
//    argmax/argmin give i64 and reject bool.
//  * bf16/f16 are accumulated in f32 and rounded once; f32 in f32 (pairwise/blocked, so the error
//    grows like log n, not n); f64 in f64; integers in i64 (wrapping).
//  * NaN propagates through amax/amin/sum/mean/logsumexp; argmax/argmin return the first NaN's index;
//    otherwise ties give the first occurrence.
//  * Empty reductions: sum -> 0, mean -> NaN, logsumexp -> -inf; amax/amin/argmax/argmin throw.
//  * The result of a reduction depends only on the input's shape and values, never on the thread count.
#pragma once

#include <optional>

#include "lmcore/core/tensor.h"

namespace lmcore {

Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Index along `dim`; without a dim, the index into the flattened tensor (keepdim then keeps every dim as 1).
Tensor argmax(const Tensor& x, std::optional<std::int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<std::int64_t> dim = std::nullopt, bool keepdim = false);

enum class ReduceOp : std::uint8_t { sum = 0, mean = 1, amax = 2, amin = 3, logsumexp = 4, argmax = 5, argmin = 6 };

// Plain one-element-at-a-time reductions in f64 (i64 for integer sums), the reference the tests compare
// the kernels above against. For argmax/argmin, `dims` holds at most one dim (empty: flattened).
Tensor reduce_reference(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim);

}  // namespace lmcore
