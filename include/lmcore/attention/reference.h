// lmcore/attention/reference.h — naive O(L x S) attention, forward and backward, in f64.
//
// The oracle the flex and sdpa kernels are tested against: for every query row, every key is scored,
// modified, masked and soft-maxed directly from the definitions, with no blocks and no online softmax.
// It shares no code with the kernels: the mask comes from MaskMod::allowed element by element, the
// score modifiers are evaluated from their formulas (ScoreMod::steps()), and the parameter gradients
// follow the chain rule per element. Inputs of any float dtype are read as the values they hold.
//
//   FlexResult ref = attention_reference(q, k, v, mask, score_mod, scale);
#pragma once

#include "lmcore/attention/flex_attention.h"

namespace lmcore::attention {

// out [B, Hq, L, Dv] f64, lse [B, Hq, L] f64 (-inf for a row with no allowed key). scale 0 means 1 / sqrt(D).
FlexResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const MaskMod& mask,
                               const ScoreMod& score_mod = {}, double scale = 0.0);
// dq, dk, dv and the score_mod parameter gradients (as FlexGrads::score_mod_grads), all f64.
// The softmax backward needs delta_i = sum_j P_ij dP_ij, which equals d_out_i . out_i. By default the
// reference takes the exact sum; given `out` it takes d_out_i . out_i of those values, as the kernels
// (and FlashAttention) do with the output they are passed: in bf16/f16 that is the rounded output, whose
// rounding then moves dq and dk by up to scale |P k| eps/2 |d_out| |out| per row.
// d_lse (optional, [B, Hq, L]) is a gradient on the log-sum-exp too: d lse_i / d s_ij = P_ij.
FlexGrads attention_backward_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                                       const MaskMod& mask, const ScoreMod& score_mod = {}, double scale = 0.0,
                                       const Tensor& out = Tensor(), const Tensor& d_lse = Tensor());

}  // namespace lmcore::attention
