// lmcore/core/compare.h — elementwise comparisons eq, ne, lt, le, gt, ge giving bool tensors.
//
//   Tensor mask = lt(logits, threshold);          // both broadcast; result bool, broadcast shape
//   Tensor hit = compare_scalar(CompareOp::eq, ids, std::int64_t{0});
//
// As torch 1.13: operands broadcast; different dtypes are first promoted (torch.promote_types: bool <
// integers < floats, u8 with a signed type -> next signed width, f16 with bf16 -> f32) and compared
// in the promoted type (bf16/f16 through f32); NaN compares unequal to everything, so only `ne` is
// true for it. Any strides are accepted. A scalar operand takes the dtype torch gives a Python number
// next to a tensor: an integer scalar compares in the tensor's dtype (i64 for a bool tensor), a float
// scalar in the tensor's dtype when it is floating, else in f32. Storage-only dtypes (f8, u16/32/64)
// are rejected, as in torch.
#pragma once

#include <cstdint>

#include "lmcore/core/tensor.h"

namespace lmcore {

enum class CompareOp : std::uint8_t { eq = 0, ne = 1, lt = 2, le = 3, gt = 4, ge = 5 };

// "eq", "ne", ... ; and the inverse (throws Error naming the string).
const char* compare_op_name(CompareOp op);
CompareOp compare_op_from_name(const char* name);

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor compare_scalar(CompareOp op, const Tensor& a, double b);
Tensor compare_scalar(CompareOp op, const Tensor& a, std::int64_t b);

inline Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::eq, a, b); }
inline Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::ne, a, b); }
inline Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::lt, a, b); }
inline Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::le, a, b); }
inline Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::gt, a, b); }
inline Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::ge, a, b); }

// One element at a time over a multi-index, no merging of dims, no vectors, no threads: the
// reference compare's tests check against.
Tensor compare_reference(CompareOp op, const Tensor& a, const Tensor& b);

}  // namespace lmcore
