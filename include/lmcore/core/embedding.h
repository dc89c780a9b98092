// lmcore/core/embedding.h — embedding lookup and its weight gradient.
//
//   // weight [V, D], ids [B, T] (i64 or i32)
//   Tensor x = embedding(weight, ids);                                   // [B, T, D]
//   Tensor dw = embedding_backward(dx, ids, V, /*padding_idx=*/0);        // [V, D], overwritten
//
// As torch.nn.functional.embedding (1.13): the forward copies row ids[...] of weight; padding_idx does
// not change the forward (that row is normally zero), only the backward, where its gradient row is
// zero. A negative padding_idx counts from the end (padding_idx + V).
// embedding_backward returns a fresh dense [V, D] gradient in grad_output's dtype (it does not
// accumulate into an existing one). Duplicate ids are summed in f32 for bf16/f16/f32 (f64 for f64), in
// the order the ids appear, one weight row per task: positions are bucketed by id (a counting sort)
// and each row sums its bucket, so the result is deterministic and independent of the thread count.
// scale_grad_by_freq divides each row's sum by the number of times its id occurs, as torch.
// Ids outside [0, V) throw Error naming the position, the value and the range.
#pragma once

#include <optional>

#include "lmcore/core/tensor.h"

namespace lmcore {

// weight [V, D] any dtype; indices any shape, i32 or i64 -> [*indices.shape, D] in weight's dtype.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx = std::nullopt);

// grad_output [*indices.shape, D] floating; -> grad_weight [num_weights, D] in grad_output's dtype.
Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, std::int64_t num_weights,
                          std::optional<std::int64_t> padding_idx = std::nullopt, bool scale_grad_by_freq = false);

// One position at a time into an f64 [V, D] buffer, then rounded: the reference for the tests.
Tensor embedding_backward_reference(const Tensor& grad_output, const Tensor& indices, std::int64_t num_weights,
                                    std::optional<std::int64_t> padding_idx = std::nullopt,
                                    bool scale_grad_by_freq = false);

}  // namespace lmcore
