// lmcore/core/gather_scatter.h — gather, scatter, scatter_add and scatter_reduce along one dim.
//
//   // logits [B, V], target [B, 1] (i64): the logit of each target
//   Tensor picked = gather(logits, 1, target);                       // [B, 1]
//   Tensor counts = scatter_add(Tensor::zeros({V}, DType::i64), 0, ids, ones);
//
// Semantics are torch 1.13's. For dim d (here d = 1 of a 3-D tensor):
//   gather:          out[i][j][k] = input[i][index[i][j][k]][k]               out has index's shape
//   scatter:         self[i][index[i][j][k]][k] = src[i][j][k]                 (or = value)
//   scatter_add:     self[i][index[i][j][k]][k] += src[i][j][k]
//   scatter_reduce:  self[i][index[i][j][k]][k] = reduce(self[...], src[i][j][k]) for reduce in
//                    sum, prod, amax, amin, mean. include_self=false first resets every position
//                    that receives a value to the reduction's identity, so self's value there is
//                    ignored; mean divides by the number of values received (+1 with include_self),
//                    flooring for integers; amax/amin propagate NaN.
// index is i64 with the same number of dims as input; index.size(k) <= input.size(k) for k != dim (and
// <= src.size(k) for every k in the scatters); only the leading index.size(k) entries of src are used.
// Every index is checked before anything is written: an index outside [0, size) throws Error naming
// the op, the argument, the position and the value, and the valid range.
// Writes happen in row-major order of index within each (all dims but `dim`) fiber, so a duplicate
// index in scatter keeps the last value and every result is deterministic. Low-precision types
// compute each step in f32 and round (as torch does). The out-of-place forms copy self first.
#pragma once

#include <string_view>

#include "lmcore/core/tensor.h"

namespace lmcore {

enum class ScatterReduce : std::uint8_t { sum = 0, prod = 1, amax = 2, amin = 3, mean = 4 };
// "sum", "prod", "amax", "amin", "mean" (torch's strings); throws Error for anything else.
ScatterReduce scatter_reduce_from_name(std::string_view name);

Tensor gather(const Tensor& input, std::int64_t dim, const Tensor& index);

Tensor& scatter_(Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& self, std::int64_t dim, const Tensor& index, double value);
Tensor& scatter_add_(Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_reduce_(Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src, ScatterReduce reduce,
                        bool include_self = true);

Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, double value);
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter_reduce(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src,
                      ScatterReduce reduce, bool include_self = true);

// Element-at-a-time versions over a full multi-index walk, the references the tests compare against.
Tensor gather_reference(const Tensor& input, std::int64_t dim, const Tensor& index);
// kind: 0 scatter, 1 scatter_add, 2 scatter_reduce (with `reduce`, `include_self`).
Tensor scatter_reference(int kind, const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src,
                         ScatterReduce reduce = ScatterReduce::sum, bool include_self = true);

}  // namespace lmcore
