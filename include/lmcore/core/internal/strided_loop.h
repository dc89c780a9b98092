// lmcore/core/internal/strided_loop.h — the loop every elementwise kernel runs over strided operands.
//
// for_each_row walks a shape for K operands, each with its own element strides (0 for a broadcast
// dim), and calls
//     body(std::array<std::byte*, K> row_ptrs, int64_t n, std::array<int64_t, K> step_bytes)
// once per innermost row; the body handles n elements spaced step_bytes apart. Dimensions that are
// contiguous in every operand are merged first, so a contiguous tensor is one long row and the body
// sees step_bytes == itemsize (its fast path). Rows are spread over the thread pool.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "lmcore/core/parallel.h"
#include "lmcore/core/tensor.h"

namespace lmcore::internal {

template <std::size_t K>
struct StridedLayout {
  Shape sizes;                           // after merging, innermost last; never empty
  std::array<Shape, K> strides_bytes;    // per operand, per dim
};

template <std::size_t K>
StridedLayout<K> merge_dims(const Shape& shape, const std::array<Shape, K>& strides,
                            const std::array<std::size_t, K>& itemsizes) {
  StridedLayout<K> out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // size-1 dims never move a pointer
    const bool can_merge = !out.sizes.empty() && [&] {
      for (std::size_t k = 0; k < K; ++k) {
        const std::int64_t inner = strides[k][d] * static_cast<std::int64_t>(itemsizes[k]);
        if (out.strides_bytes[k].back() != inner * shape[d]) return false;
      }
      return true;
    }();
    if (can_merge) {
      out.sizes.back() *= shape[d];
      for (std::size_t k = 0; k < K; ++k)
        out.strides_bytes[k].back() = strides[k][d] * static_cast<std::int64_t>(itemsizes[k]);
    } else {
      out.sizes.push_back(shape[d]);
      for (std::size_t k = 0; k < K; ++k)
        out.strides_bytes[k].push_back(strides[k][d] * static_cast<std::int64_t>(itemsizes[k]));
    }
  }
  if (out.sizes.empty()) {
    out.sizes.push_back(1);
    for (std::size_t k = 0; k < K; ++k) out.strides_bytes[k].push_back(static_cast<std::int64_t>(itemsizes[k]));
  }
  return out;
}

// `min_parallel_elements`: below this many elements in total, everything runs on the calling thread.
template <std::size_t K, typename Body>
void for_each_row(const Shape& shape, const std::array<Shape, K>& strides, const std::array<std::byte*, K>& bases,
                  const std::array<std::size_t, K>& itemsizes, Body&& body,
                  std::int64_t min_parallel_elements = 32768) {
  std::int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (numel == 0) return;
  const StridedLayout<K> layout = merge_dims<K>(shape, strides, itemsizes);
  const std::int64_t ndim = static_cast<std::int64_t>(layout.sizes.size());
  const std::int64_t inner = layout.sizes.back();
  const std::int64_t rows = numel / inner;
  std::array<std::int64_t, K> inner_step;
  for (std::size_t k = 0; k < K; ++k) inner_step[k] = layout.strides_bytes[k].back();

  // Pointers to the start of outer row r (row-major over all dims but the last).
  auto row_ptrs = [&](std::int64_t r) {
    std::array<std::byte*, K> p = bases;
    for (std::int64_t d = ndim - 2; d >= 0 && r > 0; --d) {
      const std::int64_t idx = r % layout.sizes[d];
      r /= layout.sizes[d];
      for (std::size_t k = 0; k < K; ++k) p[k] += idx * layout.strides_bytes[k][d];
    }
    return p;
  };

  const bool parallel = numel >= min_parallel_elements && !in_parallel_region();
  if (rows == 1) {
    // One long row: split it.
    const std::int64_t grain = parallel ? std::max<std::int64_t>(min_parallel_elements / 4, 4096) : inner;
    parallel_for(0, inner, grain, [&](std::int64_t lo, std::int64_t hi) {
      std::array<std::byte*, K> p = bases;
      for (std::size_t k = 0; k < K; ++k) p[k] += lo * inner_step[k];
      body(p, hi - lo, inner_step);
    });
    return;
  }
  const std::int64_t grain = parallel ? std::max<std::int64_t>(1, min_parallel_elements / 4 / inner) : rows;
  parallel_for(0, rows, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) body(row_ptrs(r), inner, inner_step);
  });
}

}  // namespace lmcore::internal
