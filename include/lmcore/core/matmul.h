// lmcore/core/matmul.h — matrix products through CBLAS (OpenBLAS).
//
// matmul(a, b) follows torch.matmul: 1-D operands are promoted and the added dim removed afterwards;
// for >= 2-D operands the leading (batch) dims broadcast: a [..., M, K] @ b [..., K, N] -> [..., M, N].
// f32 and f64 call sgemm/dgemm on the operands as they are when their strides allow it (transposed
// views need no copy); bf16 and f16 go through gemm_lowp (lmcore/core/gemm_lowp.h: oneDNN on the
// matrix units where the CPU has them, else widened to f32), with f32 accumulation, rounded once to the
// input dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lmcore/core/tensor.h"

namespace lmcore {

Tensor matmul(const Tensor& a, const Tensor& b);

// The oracle matmul's tests compare against (src/core/matmul_reference.cpp): the same shapes and
// broadcasting as matmul, from plain loops over the operands' values in f64, sharing no code with
// matmul. The result is f64 (exact products, f64 sums) whatever the input dtype.
Tensor matmul_reference(const Tensor& a, const Tensor& b);

// Row-major C[M, N] = alpha * op(A) @ op(B) + beta * C, with op(X) = X or X^T, for kernels (attention,
// loss) that manage their own buffers. lda/ldb/ldc are the row strides in elements of A, B and C as
// stored. f32 runs on the path f32_gemm_path() names; f64 is always OpenBLAS's dgemm. Threads: as
// cblas_sgemm, i.e. single-threaded inside a parallel_for body or under BlasSingleThreaded, else over
// all threads (OpenBLAS's own, or lmcore's pool on the oneDNN path).
void gemm_f32(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
              const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
              std::int64_t ldc);
void gemm_f64(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
              const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
              std::int64_t ldc);

// Where gemm_f32 runs. The rule (f32_gemm_path_description says which applied): oneDNN's f32 matmul
// when its kernels use AVX-512 here and OpenBLAS's kernel for this CPU does not. Debian's OpenBLAS
// 0.3.21 runs its Haswell (AVX2) kernel on Zen 4/5, where oneDNN's brgemm measured 1.7-2.1x faster
// single-threaded (185-219 vs 102-111 GFLOPS for 2048^3 halves, the LCE, trainer and attention tile
// shapes). Where OpenBLAS has an AVX-512 kernel (SkylakeX, Cooperlake, SapphireRapids: Intel) it
// stays, as before: it measured 205 GFLOPS per core on a Sapphire Rapids Xeon, and oneDNN's f32 has
// not been timed there yet (`lmcore bench core` times both paths side by side on any CPU).
// LMCORE_ONEDNN=0 forces OpenBLAS.
enum class F32GemmPath : std::uint8_t { openblas = 0, onednn = 1 };
F32GemmPath f32_gemm_path();
// One line for `lmcore info`: the path and why.
std::string f32_gemm_path_description();
// Forces a path from now on (tests, benchmarks); std::nullopt restores the rule.
void set_f32_gemm_path(std::optional<F32GemmPath> path);

// While alive, OpenBLAS runs single-threaded. For kernels (attention, loss) that call sgemm on tiles
// from inside parallel_for: a threaded sgemm per tile from every worker oversubscribes the cores, and
// OpenBLAS's own split of a few hundred rows runs well under half its single-thread speed (measured on
// the 2-core box: 128x128x64 tiles from 2 workers reach 62 GFLOPS with 1 BLAS thread, 9 with 2).
// Nested and concurrent guards, from any part, share one count; the last one out restores the
// setting found by the first.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;
};

}  // namespace lmcore
