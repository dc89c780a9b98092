// lmcore bench core — the tensor core's kernels: sgemm GFLOPS (the yardstick other suites quote),
// and the casts that mixed precision leans on.
#include <vector>

#include "bench/suites/bench_suite.h"
#include "lmcore/core/copy.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"

namespace lmcore::bench {

namespace {

Tensor random_tensor(const Shape& shape, std::uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  std::uint32_t s = seed * 2654435761u + 1;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  return t;
}

}  // namespace

std::vector<BenchTable> run_core_suite(const BenchOptions& options) {
  BenchTable gemm{"core: sgemm (OpenBLAS)", {"M", "N", "K", "ms", "GFLOPS"}, {}, {}};
  const std::vector<std::int64_t> sizes = options.quick ? std::vector<std::int64_t>{512}
                                                        : std::vector<std::int64_t>{256, 512, 1024, 2048};
  for (std::int64_t n : sizes) {
    Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2);
    const double s = time_median([&] { (void)matmul(a, b); }, options.quick ? 3 : 5);
    gemm.rows.push_back({n, n, n, s * 1e3, 2.0 * n * n * n / s / 1e9});
  }

  BenchTable cast{"core: casts, contiguous", {"op", "elements", "ms", "GB/s (in+out)"}, {}, {}};
  const std::int64_t n = options.quick ? (1 << 22) : (1 << 24);
  Tensor x = random_tensor({n}, 3);
  Tensor xb = x.to(DType::bf16), xh = x.to(DType::f16);
  struct Case { const char* name; Tensor src; DType to; };
  for (const Case& c : {Case{"f32->bf16", x, DType::bf16}, Case{"bf16->f32", xb, DType::f32},
                        Case{"f32->f16", x, DType::f16}, Case{"f16->f32", xh, DType::f32}}) {
    Tensor dst = Tensor::empty(c.src.shape(), c.to);
    const double s = time_median([&] { copy_cast(c.src, dst); }, 5);
    const double bytes = static_cast<double>(c.src.nbytes() + dst.nbytes());
    cast.rows.push_back({c.name, n, s * 1e3, bytes / s / 1e9});
  }
  cast.notes.push_back(fmt::format("lmcore threads: {}", num_threads()));
  return {gemm, cast};
}

}  // namespace lmcore::bench
