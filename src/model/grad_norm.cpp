#include "lmcore/model/grad_norm.h"

#include <algorithm>
#include <vector>

#include "lmcore/core/parallel.h"
#include "src/model/layer_kernels.h"

namespace lmcore::model {

double grad_norm_squared(const float* grads, std::int64_t n) {
  // Fixed chunks of 64K summed in f64 (vectorised: a plain f64 loop was bound by the add latency, 12 GB/s),
  // then the chunk sums in order: deterministic for any thread count.
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> sums(static_cast<std::size_t>(chunks), 0.0);
  parallel_for(0, chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const std::int64_t lo = c * kChunk, hi = std::min(n, (c + 1) * kChunk);
      sums[static_cast<std::size_t>(c)] = detail::sum_squares_f64(grads + lo, hi - lo);
    }
  });
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

double clip_grad_norm(float* grads, std::int64_t n, double norm, double max_norm) {
  if (!(max_norm > 0)) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  if (!(coef < 1.0)) return 1.0;
  const float c = static_cast<float>(coef);
  parallel_for(0, n, 65536, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) grads[i] *= c;
  });
  return coef;
}

}  // namespace lmcore::model
