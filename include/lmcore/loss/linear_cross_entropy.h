// lmcore/loss/linear_cross_entropy.h — the final projection fused with cross-entropy: the
// [N x V] logits never exist.
//
//   LossOptions opt;                 // see cross_entropy.h for every option and the exact definition
//   opt.label_smoothing = 0.1;
//   opt.z_loss = 1e-4;
//   Tensor d_weight = Tensor::zeros({V, H}, DType::f32);      // gradients are ADDED into it
//   LinearCrossEntropyOutput out = linear_cross_entropy_with_grad(hidden, weight, target, opt,
//                                                                  Tensor::full({}, 1.0, DType::f32),
//                                                                  d_weight, /*d_bias=*/Tensor());
//   // out.loss, out.z_loss, out.lse, out.d_hidden
//
// Shapes: hidden [N, H], weight [V, H] (the nn.Linear layout, possibly tied to an embedding), target
// [N] i64, bias and class weights [V]. logits = hidden @ weight^T + bias, then softcap, then the loss.
//
// How: the tokens are cut into tiles of T rows and the vocabulary into chunks of C columns; each
// [T x C] tile of logits comes from one sgemm (dgemm for f64 accumulation) and is folded into a
// running (online) logsumexp per token, together with the target logit and the class-weighted logit
// sum that label smoothing needs. The backward recomputes a tile, turns it into d_logits in place
// and adds d_logits @ W_chunk into d_hidden and d_logits^T @ hidden_tile into d_weight. When a tile
// spans the whole vocabulary (C = V), the _with_grad entry point does forward and backward from one
// computation of the tile (3 GEMMs, as the unfused path); otherwise it makes two passes (4 GEMMs).
// Each GEMM step is cut into one vocabulary slice per thread, each slice a single-threaded BLAS call
// (OpenBLAS is held at one thread during the call): a tile's few hundred rows against all of W run
// several times slower under OpenBLAS's own threading than as independent per-core calls.
//
// Memory: with chunk_size = token_tile = 0 the tiling is picked from a budget B: options.memory_budget,
// capped at an eighth of the [N, V] logits in the accumulation type (what the unfused path holds about
// three times over) but not under 8 MiB; the matrix units use memory_budget as it is. The whole
// vocabulary per tile with T = B / (V * 4) rows when that is at least 64 rows, otherwise T = 64 and
// C = B / (64 * 4). Extra memory is then about the budget whatever V is, plus one
// [T, H] partial d_hidden per thread beyond the first, plus, for bf16/f16 inputs, f32 copies of a
// tile of hidden and of a weight panel per thread (budget / 8 in all), plus an f32 [V, H]
// accumulator only when d_weight is not itself f32 (pass an f32 d_weight to avoid it).
//
// Workspace: the tiles above (the logits tile and its bf16 twin, conversion panels and hidden rows,
// the per-thread partial d_hidden sums, the d_hidden tile when hidden is not Acc) can live in memory
// the caller already has and does not need during the call (a trainer's activation scratch):
// options.workspace with linear_cross_entropy_workspace_bytes() bytes. Same tiling, same results to
// the bit; too small a workspace is an error naming both sizes. Not in it: the per-token vectors
// (N values each), the returned tensors and the [V, H] Acc accumulator of a non-Acc d_weight.
//
// Precision: every GEMM and reduction runs in options.accumulate (f32 or f64); d_weight is summed
// over all tokens in that type and rounded once into d_weight (bf16 inputs never accumulate in bf16).
//
// Matrix units: bf16 hidden and weight with f32 accumulation, on a CPU where core/gemm_lowp.h takes
// bf16 to oneDNN (AMX or AVX-512 BF16), run the three products there instead: hidden and weight are
// read as they are (no f32 copies), logits come out in f32 (exact products, f32 sums), the loss,
// logsumexp and d_logits stay f32, and d_logits are rounded to bf16 right before the two gradient
// products (as FlashAttention rounds P), whose sums stay f32. The error of d_hidden and d_weight is
// then at bf16's rounding floor (about eps_bf16/2 of max|want|) rather than f32's. Each product is
// one gemm_lowp call spread over the pool; the tile's bf16 copy of d_logits counts against
// memory_budget (T = budget / (V * 6) rows). Forward + backward together (dense weight, no softcap)
// instead keep the tile transposed, [C, T], and write the bf16 d_logits over it in place: the logits
// and d_weight products then read W and d_logits without oneDNN re-blocking them, one vocabulary slice
// per thread, and the tile takes 4 bytes a logit (plus one f32 [H, T] partial d_hidden per thread):
// whole-vocabulary tiles of T = budget / (V * 4) rows when that is >= 160 (one pass: V = 128256
// with the default budget gets 16 tiles of 256 rows), else chunks of the vocabulary with up to 4096
// rows, two passes. set_lowp_gemm_onednn(false) or
// LMCORE_ONEDNN=0 gives the widened f32 path above.
#pragma once

#include "lmcore/core/tensor.h"
#include "lmcore/loss/cross_entropy.h"

namespace lmcore {

// LossResult plus the input gradient.
struct LinearCrossEntropyOutput {
  Tensor loss;      // as LossResult
  Tensor z_loss;
  Tensor lse;
  Tensor d_hidden;  // [N, H] in hidden's dtype
};

// ---- fused path ----

// Forward only.
LossResult linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                const LossOptions& options);

// Backward: returns d_hidden [N, H] (hidden's dtype) and ADDS d_loss/d_weight into d_weight [V, H]
// and d_loss/d_bias into d_bias [V] when they are defined (any float dtype; skipped when undefined).
// grad_loss: scalar for mean/sum, [N] for none. lse: the forward's, recomputed when undefined.
Tensor linear_cross_entropy_backward(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                     const Tensor& grad_loss, const LossOptions& options,
                                     const Tensor& lse, Tensor d_weight, Tensor d_bias);

// Forward and backward in one call (one pass over the vocabulary when a tile spans it). grad_loss
// must be known in advance (1 for a plain mean). Same accumulation rules as the backward.
LinearCrossEntropyOutput linear_cross_entropy_with_grad(const Tensor& hidden, const Tensor& weight,
                                                        const Tensor& target, const LossOptions& options,
                                                        const Tensor& grad_loss, Tensor d_weight,
                                                        Tensor d_bias);

// Bytes of LossOptions::workspace that a fused call needs for hidden [n, h] and weight [v, h] of
// `dtype`, both row-contiguous, with these options (the tiling and the matrix-unit path as the call
// picks them on this machine): backward = true for linear_cross_entropy_backward / _with_grad (also
// enough for the forward), false for the forward alone.
std::size_t linear_cross_entropy_workspace_bytes(std::int64_t n, std::int64_t h, std::int64_t v, DType dtype,
                                                 const LossOptions& options, bool backward = true);

// ---- unfused path (reference and baseline) ----
// logits = matmul(hidden, weight^T) [N, V] in the input dtype (+ bias), then cross_entropy; the
// backward materialises d_logits [N, V] and uses two matmuls. Same options and results.

LossResult linear_cross_entropy_unfused(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                        const LossOptions& options);

// Forward then backward, keeping the logits alive in between as autograd would.
LinearCrossEntropyOutput linear_cross_entropy_unfused_with_grad(const Tensor& hidden, const Tensor& weight,
                                                                const Tensor& target,
                                                                const LossOptions& options,
                                                                const Tensor& grad_loss, Tensor d_weight,
                                                                Tensor d_bias);

}  // namespace lmcore
