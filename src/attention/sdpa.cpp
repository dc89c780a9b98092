// sdpa: the dense baseline. The same kernels as flex attention, over a block mask that lists every
// tile (explicit mask: every tile partial, evaluated from the tensor; causal: the lower triangle, as
// a causal flash kernel computes it; no mask: every tile full).
#include "lmcore/attention/sdpa.h"

#include "src/attention/flex_attention_internal.h"

namespace lmcore::attention {
namespace {

BlockMask sdpa_block_mask(const SdpaOptions& o, const detail::AttentionShape& sh, const char* op) {
  LMCORE_CHECK(o.block >= 16 && o.block <= 1024, "{}: block must be in [16, 1024], found {}", op, o.block);
  if (o.attn_mask.defined()) {
    LMCORE_CHECK(!o.causal, "{}: pass either attn_mask or causal, not both", op);
    const Tensor& m0 = o.attn_mask;
    LMCORE_CHECK(m0.dtype() == DType::boolean, "{}: attn_mask must be bool (true = attend), found {}", op,
                 m0.dtype());
    LMCORE_CHECK(m0.dim() >= 2 && m0.dim() <= 4, "{}: attn_mask must have 2 to 4 dims, found {}", op,
                 shape_str(m0.shape()));
    Tensor m = m0;
    while (m.dim() < 4) m = m.unsqueeze(0);
    const bool ok = (m.size(0) == 1 || m.size(0) == sh.batch) && (m.size(1) == 1 || m.size(1) == sh.q_heads) &&
                    (m.size(2) == 1 || m.size(2) == sh.q_len) && (m.size(3) == 1 || m.size(3) == sh.kv_len);
    LMCORE_CHECK(ok, "{}: attn_mask {} does not broadcast to [B, Hq, L, S] = [{}, {}, {}, {}]", op,
                 shape_str(m0.shape()), sh.batch, sh.q_heads, sh.q_len, sh.kv_len);
    m = m.expand({m.size(0), m.size(1), sh.q_len, sh.kv_len});
    return dense_block_mask(MaskMod::from_tensor(m), m.size(0), m.size(1), sh.q_len, sh.kv_len, o.block, o.block);
  }
  if (o.causal) return create_block_mask(MaskMod::causal(), 1, 1, sh.q_len, sh.kv_len, o.block, o.block);
  return full_block_mask(sh.q_len, sh.kv_len, o.block, o.block);
}

}  // namespace

SdpaResult sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& options) {
  const char* op = "sdpa";
  const detail::AttentionShape sh = detail::check_qkv(q, k, v, options.scale, op);
  const BlockMask bm = sdpa_block_mask(options, sh, op);
  FlexResult r = detail::forward(q, k, v, bm, ScoreMod(), sh, op);
  return {r.out, r.lse};
}

FlexGrads sdpa_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& d_out, const SdpaOptions& options) {
  const char* op = "sdpa_backward";
  const detail::AttentionShape sh = detail::check_qkv(q, k, v, options.scale, op);
  const BlockMask bm = sdpa_block_mask(options, sh, op);
  return detail::backward(q, k, v, out, lse, d_out, bm, ScoreMod(), sh, op);
}

}  // namespace lmcore::attention
