// lmcore/core/gemm_lowp.h — bf16 and f16 matrix products on the CPU's matrix units, f32 accumulation.
//
//   A: op(A) is [M, K], B: op(B) is [K, N], both bf16 (or both f16); C: [M, N], f32 or the inputs' dtype.
//
//   // C (f32) = X (bf16 [T, D]) @ W^T (W bf16 [F, D]), the usual linear layer:
//   gemm_lowp(DType::bf16, DType::f32, false, true, T, F, D, 1.0f, x, D, w, D, 0.0f, c, F);
//
// Row-major C = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T, with the same argument order as
// gemm_f32 (lmcore/core/matmul.h); lda/ldb/ldc are the row strides of A, B and C as stored. Products
// of bf16 pairs are exact in f32 and are summed in f32; a low-precision C is rounded once, at the end
// (to nearest even). beta == 0 never reads C (NaN in C is overwritten); beta != 0 reads C in its dtype.
//
// Paths, picked at run time (lowp_gemm_path):
//  * onednn   — oneDNN's matmul primitive (brgemm kernels on AMX or AVX-512 BF16), for bf16 when the
//               CPU has AVX-512 BF16 (oneDNN reports avx512_core_bf16 or better). One primitive per
//               (shape, transposes, dtypes, alpha, beta) is created on first use and cached (thread-safe).
//               oneDNN 2.6 has no f16 matmul on the CPU, so f16 never takes this path.
//  * widened  — both operands widened to f32 (exact) and multiplied with OpenBLAS's sgemm: every CPU,
//               every dtype; the answer agrees with the oneDNN path within f32 summation order.
// LMCORE_ONEDNN=0 in the environment, or set_lowp_gemm_onednn(false), forces the widened path.
//
// Threads: called outside a parallel_for, the product is cut into row (or column) blocks over lmcore's
// own pool (num_threads()), each block a single-threaded oneDNN or sgemm call; inside a parallel_for
// body it runs single-threaded on the calling thread (attention and loss tiles). oneDNN's OpenMP
// threads are never started, so nothing spins beside lmcore's pool.
#pragma once

#include <cstdint>
#include <string>

#include "lmcore/core/dtype.h"

namespace lmcore {

// C = alpha * op(A) @ op(B) + beta * C. `ab` is A's and B's dtype (bf16 or f16), `c_dtype` is C's
// (f32 or `ab`). Throws lmcore::Error naming the argument for a bad dtype, a negative size or a
// leading dimension smaller than its row.
void gemm_lowp(DType ab, DType c_dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c,
               std::int64_t ldc);

// The same product in f64 arithmetic by triple loop, rounded once to c_dtype: the reference the
// tests compare against (shares no code with gemm_lowp).
void gemm_lowp_reference(DType ab, DType c_dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                         std::int64_t k, float alpha, const void* a, std::int64_t lda, const void* b,
                         std::int64_t ldb, float beta, void* c, std::int64_t ldc);

enum class LowpGemmPath : std::uint8_t {
  widened = 0,  // f32 sgemm on widened copies
  onednn = 1,   // oneDNN matmul primitive
};

// The path gemm_lowp takes now for inputs of dtype `ab` (bf16 or f16).
LowpGemmPath lowp_gemm_path(DType ab);
// One line for `lmcore info`, e.g. "oneDNN brg:avx512_core_amx_bf16" or
// "widened to f32, oneDNN's f32 matmul (oneDNN 2.6 has no f16 CPU matmul)" (the f32 path is gemm_f32's).
std::string lowp_gemm_path_description(DType ab);
// false: every call takes the widened path from now on (tests, comparisons); true: the automatic
// choice again (oneDNN where the CPU supports it, unless LMCORE_ONEDNN=0).
void set_lowp_gemm_onednn(bool enabled);

// oneDNN's version and the instruction set its kernels use here, e.g. "2.6.3 avx512_core_amx".
std::string onednn_info();

// gemm_f32's product (lmcore/core/matmul.h: same arguments and contract) through oneDNN's f32 matmul,
// cut over lmcore's pool like gemm_lowp when `may_split`, else on the calling thread. gemm_f32 calls
// it where f32_gemm_path() says so.
void gemm_f32_onednn(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                     const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                     std::int64_t ldc, bool may_split);
// True when oneDNN may be used (LMCORE_ONEDNN is not 0) and its kernels here use AVX-512
// (avx512_core or better).
bool onednn_has_avx512();

}  // namespace lmcore
