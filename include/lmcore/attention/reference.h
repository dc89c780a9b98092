// lmcore/attention/reference.h — naive O(L x S) attention, forward and backward, in f64 accumulation.
//
// The oracle the flex and sdpa kernels are tested against: for every query row, every key is scored,
// modified, masked and soft-maxed directly from the definitions, with no blocks and no online softmax.
//
//   FlexResult ref = attention_reference(q, k, v, mask, score_mod, scale);
#pragma once

#include "lmcore/attention/flex_attention.h"

namespace lmcore::attention {

// out [B, Hq, L, Dv] f32, lse [B, Hq, L] f32. scale 0 means 1 / sqrt(D).
FlexResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const MaskMod& mask,
                               const ScoreMod& score_mod = {}, double scale = 0.0);
// dq, dk, dv and the score_mod parameter gradients (as FlexGrads::score_mod_grads) in f32.
FlexGrads attention_backward_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                                       const MaskMod& mask, const ScoreMod& score_mod = {}, double scale = 0.0);

}  // namespace lmcore::attention
