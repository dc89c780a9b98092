// lmcore/loss/cross_entropy.h — cross-entropy on materialised logits, and the options every loss in
// this part shares. This is the unfused path: the reference the fused linear cross-entropy
// (linear_cross_entropy.h) is tested against, and the baseline its benchmark compares with.
//
//   LossOptions opt;
//   opt.label_smoothing = 0.1;
//   LossResult r = cross_entropy(logits /*[N, V]*/, target /*[N] i64*/, opt);
//   Tensor dlogits = cross_entropy_backward(logits, target, Tensor::full({}, 1.0, DType::f32), opt, r.lse);
//
// Definitions (z are the logits after bias and softcap, lse_i = log sum_j exp z_ij, w the class
// weights or all ones, eps the label smoothing, s the z-loss scale; token i is counted when
// target_i != ignore_index):
//   ce_i = (1 - eps) * w[t_i] * (lse_i - z_i,t_i) + (eps / V) * sum_j w_j * (lse_i - z_ij)
//   zl_i = s * lse_i^2
//   none: loss_i = ce_i + zl_i (0 for ignored tokens)
//   sum:  loss = sum_i ce_i + sum_i zl_i                            (over counted tokens)
//   mean: loss = sum_i ce_i / sum_i w[t_i] + sum_i zl_i / count     (over counted tokens)
// This is torch 1.13's F.cross_entropy (label_smoothing and weight included; its mean divides the
// smoothing term by the same sum of target weights), plus the z-loss of PaLM, which is a plain mean
// over counted tokens (not class-weighted). With every token ignored, mean gives NaN (0/0) and sum 0,
// as in torch. The softcap c, when > 0, replaces each logit x with c * tanh(x / c) before anything
// else; gradients flow through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lmcore/core/tensor.h"

namespace lmcore {

enum class Reduction : std::uint8_t { none = 0, mean = 1, sum = 2 };
// "none" | "mean" | "sum"; throws Error naming the string otherwise.
Reduction reduction_from_name(std::string_view name);
std::string_view reduction_name(Reduction r);

struct LossOptions {
  Tensor bias;                    // [V] optional, added to the logits (used by the linear losses only)
  Tensor class_weight;            // [V] optional, torch's `weight`
  std::int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;   // in [0, 1]
  double z_loss = 0.0;            // scale s of s * lse^2, >= 0
  double softcap = 0.0;           // c > 0 caps logits at c * tanh(x / c); 0 disables
  // Vocabulary columns per tile of the fused path; 0 picks them from memory_budget (see
  // linear_cross_entropy.h). Ignored by the unfused path.
  std::int64_t chunk_size = 0;
  // Rows (tokens) per tile of the fused path; 0 picks them from memory_budget.
  std::int64_t token_tile = 0;
  // Bytes the fused path may spend on its logits tile when it chooses the tiling itself. 128 MiB
  // gives ~260 token rows per tile at V = 128256 in f32: fewer rows make every tile re-read all of
  // W and re-write all of d_weight more often (about 25% slower at 64 MiB in `lmcore bench lce`).
  // Off the matrix units the tile also takes at most an eighth of the [N, V] logits (>= 8 MiB).
  std::int64_t memory_budget = std::int64_t{128} << 20;
  // Arithmetic type: f32 (default) or f64. bf16/f16 inputs are widened to it.
  DType accumulate = DType::f32;
  // Memory of the caller's for the fused path's tiles (linear_cross_entropy.h, Workspace), 64-byte
  // aligned, at least linear_cross_entropy_workspace_bytes() long; nullptr: allocated per call.
  // Ignored by the unfused path.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// Outputs of a loss forward. All in the accumulation dtype.
struct LossResult {
  Tensor loss;    // scalar for mean/sum, [N] for none: cross-entropy plus z-loss
  Tensor z_loss;  // the z-loss term alone, same shape as loss (zeros when the scale is 0)
  Tensor lse;     // [N] logsumexp of each token's (capped) logits, what the backward needs
};

// logits [N, V] (f32, f64, bf16, f16), target [N] i64. Logits are widened to options.accumulate.
LossResult cross_entropy(const Tensor& logits, const Tensor& target, const LossOptions& options);

// Gradient of the loss with respect to the logits, [N, V] in the logits' dtype (a new tensor).
// grad_loss is a scalar for mean/sum and [N] for none. `lse` is the forward's (recomputed when
// undefined).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& grad_loss,
                              const LossOptions& options, const Tensor& lse = Tensor());

}  // namespace lmcore
