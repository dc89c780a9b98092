// Private: the softmax loops of the fused linear cross-entropy on the matrix units, where a tile holds
// the logits transposed, zT [rows = vocabulary, n = tokens] (row-major, row stride n): each loop walks
// the vocabulary rows and keeps one value per token (per column) in a vector lane, so there is no
// per-token horizontal reduction and every load is contiguous. Highway, one copy per SIMD target.
// The NaN rule is row_kernels.h's: a NaN logit makes its token's max, sums and gradient NaN.
//
// Sums over the rows are taken in blocks of kColBlock rows whose partial sums are then added up, so
// the rounding error grows with kColBlock + rows / kColBlock terms rather than with rows.
#pragma once

#include <cstdint>

#include "lmcore/core/low_precision.h"

namespace lmcore::loss_detail {

inline constexpr std::int64_t kColBlock = 64;

// z[r, j] = exp(z[r, j] - max_r z[r, j]) and s[j] += their sum, in one pass over the tile with a
// running max instead of a separate max pass. Per block of kColBlock rows: the block's max (and, when
// wz is not null, wz[j] += sum_r w[r] z[r, j], w null meaning ones) is read while the block is in
// cache; m[j] and the sum s[j] so far move to the new max; then z = exp(z - m[j]) (0 for z = -inf) is
// stored and summed. block_m [ceil(rows / kColBlock), n] receives the max each block's exps were taken
// against: e * exp(block_m - final max) is the exp against the final max (ColGrad::block_m). m starts
// at -inf and s at 0 for a fresh column.
void col_exp_store_sum_online_f32(float* z, std::int64_t rows, std::int64_t n, float* m, float* s, const float* w,
                                  float* wz, float* block_m);
// factor[j] = exp(from[j] - to[j]), 1 where they are equal (also both -inf).
void col_rebase_f32(std::int64_t n, const float* from, const float* to, float* factor);

// Per-token coefficients of d loss / d logit on exp values e = exp(z - m) (see loss_common.h RowGrad):
//   d[r, j] = keep[j] ? (e[r, j] * scale[j] - bw[j] * w[r]) - (row0 + r == target[j] ? bt[j] : 0) : 0
// with w[r] = 1 when w is null, and the bw term left out when bw is null. keep[j] is 1 or 0 (ignored
// tokens: 0, also when their logits are NaN).
struct ColGrad {
  const float* scale = nullptr;       // [n]: a / sum of exp
  const float* bw = nullptr;          // [n] or null
  const float* w = nullptr;           // [rows] class weights of these rows, or null
  const float* bt = nullptr;          // [n]
  const std::int32_t* target = nullptr;  // [n], vocabulary index (-1: none)
  const float* keep = nullptr;        // [n]
  const float* block_m = nullptr;     // [ceil(rows / kColBlock), n] or null: e of block b is against
  const float* m = nullptr;           // block_m[b] instead of the final max m [n]
};
// out[r, j] = d[r, j] rounded to bf16 (to nearest even, NaN -> NaN as cast_f32_to_lowp); when db is
// not null, db[r] += sum_j d[r, j] (unrounded). out may be e itself (out == (bf16*)e): bf16 row r then
// lands on bytes that held f32 rows <= r / 2, which have been read by then.
void col_grad_to_bf16(const float* e, std::int64_t rows, std::int64_t n, std::int64_t row0, const ColGrad& g,
                      bf16* out, float* db);

}  // namespace lmcore::loss_detail
