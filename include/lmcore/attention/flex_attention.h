// lmcore/attention/flex_attention.h — block-sparse attention from a block mask and a score modifier.
//
//   q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]   (Hq a multiple of Hkv: grouped-query attention)
//   out [B, Hq, L, Dv] in the dtype of q;  lse [B, Hq, L] in f32 (f64 for f64 inputs), natural log of the
//   softmax denominator
//
//   BlockMask bm = create_block_mask(MaskMod::sliding_window(256), 1, 1, L, S);
//   FlexOptions opt;  opt.block_mask = &bm;  opt.return_lse = true;
//   FlexResult r = flex_attention(q, k, v, opt);
//   FlexGrads g = flex_attention_backward(q, k, v, r.out, r.lse, d_out, opt);  // overwrites, not accumulates
//   // with opt.score_mod = ScoreMod::alibi(slopes): g.score_mod_grads[0] is d loss / d slopes
//
// Inputs are f32, bf16, f16 or f64 (all three the same dtype), any strides; arithmetic is f32, and f64
// end to end for f64 inputs (dgemm tiles, score-modifier tables and caps as given: the path that
// gradient checks run on; it is not tuned for speed). D and Dv are at
// most 256; L and S are any length (the last block of each is short). Per (b, head, query block) the
// kernel walks the listed key blocks in increasing order with an online softmax, multiplying the
// query block with runs of consecutive key blocks (up to 512 keys at a time) with sgemm; empty blocks are never touched and fully allowed blocks
// never evaluate the mask. A query row with no allowed key gives out = 0 and lse = -inf (and zero
// gradients), never NaN.
//
// The backward pass is deterministic: the same bits on every run at the same thread count. dk and dv
// are computed per key block from the transposed block lists (one owner each); dq is accumulated
// per thread over a fixed, cost-balanced split of the key blocks and the per-thread parts are summed
// in thread order.
#pragma once

#include <cstdint>
#include <vector>

#include "lmcore/attention/block_mask.h"
#include "lmcore/attention/score_mod.h"
#include "lmcore/core/tensor.h"

namespace lmcore::attention {

struct FlexOptions {
  const BlockMask* block_mask = nullptr;  // nullptr: every key for every query
  ScoreMod score_mod;                     // identity by default
  double scale = 0.0;                     // 0: 1 / sqrt(D)
  bool return_lse = false;
  // Backward: also compute the gradients of the score_mod's parameter tables (FlexGrads::score_mod_grads).
  bool score_mod_grads = true;
};

struct FlexResult {
  Tensor out;  // [B, Hq, L, Dv], dtype of q
  Tensor lse;  // [B, Hq, L] f32 (f64 for f64 inputs), when asked
};

struct FlexGrads {
  Tensor dq, dk, dv;  // shapes and dtypes of q, k, v
  // f32 (f64 for f64 inputs), one per parameter step of options.score_mod in chain order (ScoreMod::parameter_shapes():
  // relative_position_bias [rows, 2R + 1], alibi [slopes]); empty when it has none or when
  // options.score_mod_grads is false.
  std::vector<Tensor> score_mod_grads;
};

FlexResult flex_attention(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& options = {});

// out and lse are the forward results; d_out has the shape of out.
FlexGrads flex_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& d_out, const FlexOptions& options = {});
// The same with a gradient on lse too: d_lse [B, Hq, L] (any float dtype; undefined: none). Since
// d lse_i / d s_ij = P_ij, it adds P_ij d_lse_i to each score's gradient (it enters the softmax
// backward as delta_i - d_lse_i); rows with no allowed key get nothing from it.
FlexGrads flex_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& d_out, const Tensor& d_lse,
                                  const FlexOptions& options = {});

// The same two passes writing into the caller's tensors instead of returning new ones, so that a
// model's own buffers can take the results without a copy (Llama's attention reads q, k, v straight
// from its packed qkv activations and writes dq, dk, dv into its packed gradient):
//   out [B, Hq, L, Dv] and dq, dk, dv (shapes of q, k, v) in the compute dtype (f32; f64 for f64
//   inputs), any strides with a contiguous last dim and rows that do not overlap; lse [B, Hq, L]
//   contiguous, same dtype. The gradients are overwritten (not accumulated); the backward returns the
//   score_mod parameter gradients (FlexGrads::score_mod_grads). Bad outputs are errors naming them.
// Every entry point reads q, k, v (and out, d_out) through their strides when they are in the dtype
// the kernels take (f32, f64, bf16 on the matrix units) and have a contiguous last dim: permuted
// views are not copied. The results are those of contiguous inputs, bit for bit.
void flex_attention_into(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse,
                         const FlexOptions& options = {});
std::vector<Tensor> flex_attention_backward_into(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse, const Tensor& d_out,
                                                 Tensor dq, Tensor dk, Tensor dv, const FlexOptions& options = {});

// Multiply-add flops of the computed blocks (2 per multiply-add): forward counts S = QK^T and PV,
// backward the five products of the standard flash backward (S, dP, dV, dK, dQ).
struct FlexFlops {
  double forward = 0, backward = 0;
};
FlexFlops flex_flops(const BlockMask& mask, std::int64_t batch, std::int64_t q_heads, std::int64_t head_dim,
                     std::int64_t value_dim);

}  // namespace lmcore::attention
