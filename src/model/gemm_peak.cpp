#include "lmcore/model/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "lmcore/core/error.h"
#include "src/model/gemm.h"

namespace lmcore::model {

double gemm_peak_gflops(DType compute, std::int64_t n, double budget_seconds) {
  LMCORE_CHECK(compute == DType::f32 || compute == DType::bf16, "gemm_peak_gflops: compute dtype must be f32 or bf16, found {}",
               compute);
  LMCORE_CHECK(n > 0, "gemm_peak_gflops: n must be positive, found {}", n);
  const std::size_t elems = static_cast<std::size_t>(n * n);
  // Operands of the compute dtype (bf16 bits of 0.5 and 0.25: exact in both dtypes).
  std::vector<float> a32(elems, 0.5f), b32(elems, 0.25f), c(elems);
  std::vector<std::uint16_t> a16(elems, 0x3f00), b16(elems, 0x3e80);
  const void* a = compute == DType::f32 ? static_cast<const void*>(a32.data()) : a16.data();
  const void* b = compute == DType::f32 ? static_cast<const void*>(b32.data()) : b16.data();
  auto once = [&] { detail::gemm(compute, false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c.data(), n); };
  using Clock = std::chrono::steady_clock;
  once();  // warm-up: packing buffers, oneDNN's JIT
  double best = 0;
  const auto start = Clock::now();
  for (int i = 0; i < 3 || std::chrono::duration<double>(Clock::now() - start).count() < budget_seconds; ++i) {
    const auto t = Clock::now();
    once();
    const double s = std::chrono::duration<double>(Clock::now() - t).count();
    best = std::max(best, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s / 1e9);
    if (i > 50) break;
  }
  return best;
}

}  // namespace lmcore::model
