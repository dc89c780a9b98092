/* lmcore/codegen/kernel_abi.h — the C ABI between lmcore and a generated kernel library (.so).
 *
 * This is the only header a generated kernel sees: the generator pastes this file's text at the top of
 * every source it emits (the build embeds it as a string), so a kernel .so depends on nothing of lmcore
 * and on no C++ runtime. Plain C: pointers, counts, no vector types.
 *
 * Every kernel library exports
 *   int         lmcore_kernel_abi_version(void);   equal to LMCORE_KERNEL_ABI_VERSION, checked on load
 *   const char* lmcore_kernel_spec(void);          the spec string it was generated for, checked on load
 * and the entry points of its kind, named below. Shapes are baked into the code as constants; the
 * arguments carry only the data pointers and the range of rows [row_begin, row_end) to process, so the
 * caller parallelises over rows. Element types are fixed by the spec: "io" buffers are f32 or bf16
 * (uint16_t bit patterns) as the spec says; weights, rstd and gradients of weights are always f32.
 *
 * Changing any struct here means bumping LMCORE_KERNEL_ABI_VERSION (it is part of every cache key).
 */
#ifndef LMCORE_CODEGEN_KERNEL_ABI_H_
#define LMCORE_CODEGEN_KERNEL_ABI_H_

#include <stdint.h>

#define LMCORE_KERNEL_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* ---- RMSNorm, kind "rmsnorm": entry points lmcore_rmsnorm_forward / lmcore_rmsnorm_backward ----
 * Rows have C = hidden elements. Forward, per row n:
 *   x = inp[n] (+ residual[n], rounded to the io dtype, stored to residual_out[n] when fused)
 *   rstd[n] = 1 / sqrt(mean(x^2) + eps);  out[n] = x * rstd[n] * weight   (rounded to the out dtype)
 * Backward, per row n (x = inp[n], the forward's normalised input; with the fused residual add the
 * gradient of x flows unchanged to both summands, so the caller passes residual_out as inp):
 *   dinp[n] += rstd * (dout*w - xhat * mean(dout*w*xhat)),  xhat = x * rstd   (ADDS, io dtype)
 *   dweight += dout * xhat                                                     (ADDS, f32)  */
typedef struct lmcore_rmsnorm_forward_args {
  void* out;                /* (N, C) out dtype */
  float* rstd;              /* (N) */
  const void* inp;          /* (N, C) io dtype */
  const void* residual;     /* (N, C) io dtype, only read when the spec fuses the residual add */
  void* residual_out;       /* (N, C) io dtype, only written when the spec fuses the residual add */
  const float* weight;      /* (C) */
  int64_t row_begin, row_end;
} lmcore_rmsnorm_forward_args;

typedef struct lmcore_rmsnorm_backward_args {
  void* dinp;               /* (N, C) io dtype, ADDED into */
  float* dweight;           /* (C), ADDED into */
  const void* dout;         /* (N, C) out dtype */
  const void* inp;          /* (N, C) io dtype */
  const float* weight;      /* (C) */
  const float* rstd;        /* (N) */
  int64_t row_begin, row_end;
} lmcore_rmsnorm_backward_args;

typedef void (*lmcore_rmsnorm_forward_fn)(const lmcore_rmsnorm_forward_args*);
typedef void (*lmcore_rmsnorm_backward_fn)(const lmcore_rmsnorm_backward_args*);

/* ---- GEMM with a fused epilogue, kind "gemm": entry point lmcore_gemm_epilogue ----
 * C (M, N) = epilogue(A (M, K) @ B (K, N)), all f32 row-major with leading dimensions lda, ldb, ldc.
 * The epilogue (fixed by the spec) is applied to each output tile right after its last K block, while
 * the tile is in cache: + bias[n]; then silu / gelu (tanh form); or the SwiGLU gate product, where B
 * holds the gate columns [0, N) and the up columns [N, 2N) (ldb >= 2N) and out = silu(A Bg) * (A Bu);
 * then + residual[m, n] (ldr). Rows [row_begin, row_end) of C are computed (a multiple of the tile's
 * rows except at the end), so callers parallelise over row blocks. */
typedef struct lmcore_gemm_args {
  const float* a;
  const float* b;
  float* c;
  const float* bias;        /* (N) or null when the spec has no bias */
  const float* residual;    /* (M, N) with leading dimension ldr, or null */
  int64_t M;
  int64_t lda, ldb, ldc, ldr;
  int64_t row_begin, row_end;
} lmcore_gemm_args;

typedef void (*lmcore_gemm_fn)(const lmcore_gemm_args*);

typedef int (*lmcore_kernel_abi_version_fn)(void);
typedef const char* (*lmcore_kernel_spec_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LMCORE_CODEGEN_KERNEL_ABI_H_ */
