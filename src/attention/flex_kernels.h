// Private: the f32 flash-style kernels behind flex_attention and sdpa, on contiguous f32 buffers.
//
//   q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], out / d_out [B, Hq, L, Dv], lse [B, Hq, L]
//   dq, dk, dv like q, k, v (overwritten)
//   score_mod_grads: when not null, one zeroed vector per parameter step of the score_mod (sized as
//   its table) receives the gradient of its table
#pragma once

#include <cstdint>
#include <vector>

#include "lmcore/attention/block_mask.h"
#include "lmcore/attention/score_mod.h"
#include "lmcore/core/matmul.h"

namespace lmcore::attention::detail {

struct AttentionShape {
  std::int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
  float scale;
};

void flex_forward_f32(const AttentionShape& shape, const BlockMask& mask, const ScoreMod& score_mod,
                      const float* q, const float* k, const float* v, float* out, float* lse);

void flex_backward_f32(const AttentionShape& shape, const BlockMask& mask, const ScoreMod& score_mod,
                       const float* q, const float* k, const float* v, const float* out, const float* d_out,
                       const float* lse, float* dq, float* dk, float* dv,
                       std::vector<std::vector<double>>* score_mod_grads = nullptr);

// The kernels hold lmcore::BlasSingleThreaded (lmcore/core/matmul.h) while they run.
using lmcore::BlasSingleThreaded;

}  // namespace lmcore::attention::detail
