#include "src/model/gemm.h"

#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/core/tensor.h"

namespace lmcore::model::detail {

namespace {

// sgemm cut over lmcore's threads: each thread multiplies a block of C's rows (or columns, when C is
// wider than tall) with a single-threaded sgemm. OpenBLAS's own threads would otherwise spin between
// calls while lmcore's pool runs the element-wise layers, and the two pools take turns at the cores.
void sgemm_on_pool(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                   const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc) {
  const std::int64_t threads = in_parallel_region() ? 1 : num_threads();
  constexpr std::int64_t kMinBlock = 64;
  const bool by_rows = m >= n;
  const std::int64_t extent = by_rows ? m : n;
  const std::int64_t parts = std::min<std::int64_t>(threads, extent / kMinBlock);
  if (parts <= 1) {
    const BlasSingleThreaded guard;
    gemm_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const BlasSingleThreaded guard;
  parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      // Block boundaries on multiples of 16 (whole SIMD rows of OpenBLAS's micro-kernel).
      const std::int64_t lo = (extent * p / parts) / 16 * 16;
      const std::int64_t hi = p + 1 == parts ? extent : (extent * (p + 1) / parts) / 16 * 16;
      if (hi <= lo) continue;
      if (by_rows) {
        const float* ap = trans_a ? a + lo : a + lo * lda;
        gemm_f32(trans_a, trans_b, hi - lo, n, k, alpha, ap, lda, b, ldb, beta, c + lo * ldc, ldc);
      } else {
        const float* bp = trans_b ? b + lo * ldb : b + lo;
        gemm_f32(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, bp, ldb, beta, c + lo, ldc);
      }
    }
  });
}

}  // namespace

void gemm(DType compute, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (compute == DType::f32) {
    sgemm_on_pool(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
                  beta, c, ldc);
    return;
  }
  LMCORE_CHECK(compute == DType::bf16, "model gemm: compute dtype must be f32 or bf16, found {}", compute);
  // bf16 operands, f32 accumulation: the CPU's matrix units through oneDNN where it has them (AMX,
  // AVX-512 BF16), else widened sgemm; either way cut over lmcore's pool.
  gemm_lowp(DType::bf16, DType::f32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace lmcore::model::detail
