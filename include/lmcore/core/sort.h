// lmcore/core/sort.h — sort along a dim (values + i64 indices) and topk.
//
//   auto [values, indices] = sort(logits, /*dim=*/-1, /*descending=*/true);
//   auto [top, where] = topk(logits, 50);            // 50 largest along the last dim, sorted
//
// Order follows torch 1.13: NaN counts as greater than every number (last ascending, first
// descending); -0.0 and +0.0 are equal. Every dtype torch sorts is accepted (f32, f64, f16, bf16, i8,
// u8, i16, i32, i64, bool; topk not bool). The sort is always stable — equal elements keep their input
// order — so `stable` only documents the caller's need; it is a radix sort on order-preserving integer
// keys (LSD, 8-bit digits, digits that are equal in every key skipped), rows in parallel. topk breaks
// ties by the lower index and always returns its k elements sorted (torch's sorted=false order is
// unspecified, so sorted order is a valid answer). Values are the input elements themselves (NaN
// payloads and signed zeros kept).
#pragma once

#include <cstdint>

#include "lmcore/core/tensor.h"

namespace lmcore {

struct SortResult {
  Tensor values;   // input's dtype, input's shape (topk: size k along dim)
  Tensor indices;  // i64, positions along dim
};

SortResult sort(const Tensor& x, std::int64_t dim = -1, bool descending = false, bool stable = false);
SortResult topk(const Tensor& x, std::int64_t k, std::int64_t dim = -1, bool largest = true, bool sorted = true);

// std::stable_sort with torch's comparison on each row, the reference the tests compare against.
SortResult sort_reference(const Tensor& x, std::int64_t dim, bool descending);
// The first k of sort_reference (largest: descending).
SortResult topk_reference(const Tensor& x, std::int64_t k, std::int64_t dim, bool largest);

}  // namespace lmcore
