// lmcore/model/grad_norm.h — the global gradient norm and torch's clipping rule over flat buffers.
#pragma once

#include <cstdint>

namespace lmcore::model {

// Sum of squares of a gradient buffer, accumulated in f64 over fixed 64K chunks summed in order:
// the same bits at every thread count.
double grad_norm_squared(const float* grads, std::int64_t n);
// torch.nn.utils.clip_grad_norm_'s rule: scale by max_norm / (norm + 1e-6) when that is below 1.
// Returns the scale applied (1 when not clipped).
double clip_grad_norm(float* grads, std::int64_t n, double norm, double max_norm);

}  // namespace lmcore::model
