// lmcore/attention/sdpa.h — dense scaled dot-product attention: the baseline flex attention is measured
// against.
//
//   SdpaResult r = sdpa(q, k, v, {.causal = true});
//   SdpaGrads g = sdpa_backward(q, k, v, r.out, r.lse, d_out, {.causal = true});
//
// Shapes and dtypes as flex_attention (GQA allowed; f64 inputs run the f64 kernels). `attn_mask` is a bool tensor broadcastable to [B, Hq, L, S]
// (true = attend). It is the same flash-style kernel as flex attention (blocked, online softmax,
// sgemm tiles) but without block sparsity: with an explicit mask every tile is computed and masked
// element by element; with causal = true the tiles above the diagonal are skipped, as any flash kernel
// does.
#pragma once

#include "lmcore/attention/flex_attention.h"

namespace lmcore::attention {

struct SdpaOptions {
  Tensor attn_mask;     // undefined: no mask
  bool causal = false;  // kv <= q; not together with attn_mask
  double scale = 0.0;   // 0: 1 / sqrt(D)
  std::int64_t block = 128;
};

struct SdpaResult {
  Tensor out;  // [B, Hq, L, Dv]
  Tensor lse;  // [B, Hq, L] f32 (f64 for f64 inputs)
};

SdpaResult sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& options = {});
FlexGrads sdpa_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& d_out, const SdpaOptions& options = {});

}  // namespace lmcore::attention
