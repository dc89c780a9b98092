// Private: the AdamW update as one Highway kernel (adamw_kernel.cpp), compiled once per SIMD target and
// dispatched at run time; AdamW::step cuts the buffer over threads. tests/train/optimizer_test.cpp
// holds the double-precision twin it is checked against.
#pragma once

#include <cstdint>

namespace lmcore::train::detail {

// The step's scalars, in f32 as torch's f32 kernels use them.
struct AdamWScalars {
  float decay_scale;  // 1 - lr * weight_decay
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;  // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float eps;
};

// One update of n elements in place, in torch.optim.AdamW's order (adamw.h); with `decay`, p is first
// scaled by decay_scale. Every element goes through the same vector instructions (the tail on a copy
// padded to a whole vector), so a slice of a buffer gets the same bits as the whole buffer; nothing
// past p + n (or g, m, v + n) is read or written.
void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamWScalars& s, bool decay);

}  // namespace lmcore::train::detail
