// Private: the shared front half of flex_attention and sdpa (checks, f32 buffers, kernel calls).
#pragma once

#include "lmcore/attention/flex_attention.h"
#include "src/attention/flex_kernels.h"

namespace lmcore::attention::detail {

AttentionShape check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const char* op);
FlexResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& bm, const ScoreMod& mod,
                   const AttentionShape& sh, const char* op);
DType compute_dtype(DType input);
void check_output(const Tensor& t, const Shape& shape, DType dtype, const char* op, const char* name, bool contiguous);
void forward_into(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& bm, const ScoreMod& mod,
                  const AttentionShape& sh, const char* op, Tensor& out, Tensor& lse);
std::vector<Tensor> backward_into(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& d_out, const BlockMask& bm, const ScoreMod& mod,
                                  const AttentionShape& sh, const char* op, bool score_mod_grads, const Tensor& d_lse,
                                  Tensor& dq, Tensor& dk, Tensor& dv);
FlexGrads backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& d_out, const BlockMask& bm, const ScoreMod& mod, const AttentionShape& sh,
                   const char* op, bool score_mod_grads = false, const Tensor& d_lse = Tensor());

}  // namespace lmcore::attention::detail
