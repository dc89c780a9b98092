// Private: the flash-style kernels behind flex_attention and sdpa, on buffers laid out as FlexLayout
// says (contiguous, or any strides with a contiguous last dim).
//
//   q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], out / d_out [B, Hq, L, Dv], lse [B, Hq, L]
//   dq, dk, dv like q, k, v, in the compute type (overwritten)
//   score_mod_grads: when not null, one zeroed vector per parameter step of the score_mod (sized as
//   its table) receives the gradient of its table
//   d_lse [B, Hq, L]: when not null, the gradient on lse too (d lse_i / d s_ij = P_ij, so it enters as
//   delta_i - d_lse_i)
//
// T is the element type of q, k, v (and of out, d_out in the backward):
//   float — f32 inputs, or bf16/f16 widened once by the caller: every tile product is an sgemm;
//   bf16  — the tile products run on the matrix units (gemm_lowp: oneDNN, f32 accumulation). Scores,
//           softmax, the online rescaling and the accumulators stay f32; P (and in the backward dS) is
//           rounded to bf16 right before it enters a product, as FlashAttention does;
//   double — f64 inputs, f64 end to end (dgemm tiles, f64 softmax, tables and caps as given): the
//           path gradient checks run on. Its row loops are plain (row_kernels.h), not tuned.
// The compute type Acc<T> (of scores, out, lse, dq, dk, dv) is double for double and float otherwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "lmcore/attention/block_mask.h"
#include "lmcore/attention/score_mod.h"
#include "lmcore/core/deferred_signals.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/low_precision.h"
#include "lmcore/core/matmul.h"

namespace lmcore::attention::detail {

struct AttentionShape {
  std::int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
  double scale;  // the f32 kernels use it rounded to f32
};

// One entry of a mask row's merged block list: a kv (forward) or q (backward) block and whether the mask
// is known to be all true on it.
struct BlockRef {
  std::int32_t index;
  bool full;
};

// The partial and full runs of one row, merged into increasing block order (the order the kernels visit).
inline void merged_blocks(const BlockRuns& partial, const BlockRuns& full, std::int64_t row,
                          std::vector<BlockRef>& out) {
  out.clear();
  auto add = [&](const BlockRuns& runs, bool is_full) {
    for (std::int64_t i = runs.offsets[static_cast<std::size_t>(row)]; i < runs.offsets[static_cast<std::size_t>(row) + 1];
         ++i) {
      const BlockRun r = runs.runs[static_cast<std::size_t>(i)];
      for (std::int32_t j = 0; j < r.length; ++j) out.push_back({r.start + j, is_full});
    }
  };
  add(partial, false);
  add(full, true);
  std::sort(out.begin(), out.end(), [](const BlockRef& a, const BlockRef& b) { return a.index < b.index; });
}

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Element strides of a [B, H, rows, dim] operand whose last dim is contiguous (row >= dim, or one row).
struct Strides4 {
  std::int64_t b = 0, h = 0, row = 0;
  std::int64_t at(std::int64_t bi, std::int64_t hi, std::int64_t r) const { return bi * b + hi * h + r * row; }
};
inline Strides4 dense4(std::int64_t heads, std::int64_t rows, std::int64_t dim) {
  return {heads * rows * dim, rows * dim, dim};
}
// Where each operand of the kernels is: q, k, v, out, d_out, dq, dk, dv as [B, H, rows, dim] with these
// strides (lse, d_lse and delta stay contiguous [B, Hq, L]).
struct FlexLayout {
  Strides4 q, k, v, out, d_out, dq, dk, dv;
};
// Every operand contiguous.
inline FlexLayout dense_layout(const AttentionShape& sh) {
  const Strides4 q = dense4(sh.q_heads, sh.q_len, sh.head_dim), k = dense4(sh.kv_heads, sh.kv_len, sh.head_dim);
  const Strides4 v = dense4(sh.kv_heads, sh.kv_len, sh.value_dim), o = dense4(sh.q_heads, sh.q_len, sh.value_dim);
  return {q, k, v, o, o, q, k, v};
}

template <typename T>
void flex_forward(const AttentionShape& shape, const FlexLayout& layout, const BlockMask& mask,
                  const ScoreMod& score_mod, const T* q, const T* k, const T* v, Acc<T>* out, Acc<T>* lse);

template <typename T>
void flex_backward(const AttentionShape& shape, const FlexLayout& layout, const BlockMask& mask,
                   const ScoreMod& score_mod, const T* q, const T* k, const T* v, const T* out, const T* d_out,
                   const Acc<T>* lse, Acc<T>* dq, Acc<T>* dk, Acc<T>* dv,
                   std::vector<std::vector<double>>* score_mod_grads = nullptr, const Acc<T>* d_lse = nullptr);

// One tile product on the calling thread, C = alpha op(A) op(B) + beta C (C f32, or f64 for f64 A and B),
// row-major with row strides.
inline void tile_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  gemm_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void tile_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                      std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  gemm_f64(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void tile_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                      std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  gemm_lowp(DType::bf16, DType::f32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The kernels hold lmcore::BlasSingleThreaded (lmcore/core/matmul.h) while they run, and each worker a
// DeferredSignals (lmcore/core/deferred_signals.h) around its tiles: the tile products may run on
// oneDNN kernels that cannot take a signal, and one pair of system calls per worker costs less than one
// per tile (a 128 x 128 x 64 product takes ~10 us; the pair 2 us on the test VM).
using lmcore::BlasSingleThreaded;
using lmcore::DeferredSignals;

}  // namespace lmcore::attention::detail
