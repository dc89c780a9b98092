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

#define LMCORE_KERNEL_ABI_VERSION 3

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
 * P (M, NB) = A (M, K) @ op(B) + bias, all f32 row-major; op(B) = B stored (K, NB) or, when the spec says
 * b_trans, B stored (NB, K) (a torch Linear weight) and used transposed. Then, per output element of
 * C (M, N), applied to each tile right after its product, while it is in cache:
 *   act none: C = P;  silu: C = P * sigmoid(P);  gelu: C = gelu_tanh(P);
 *   swiglu: NB = 2N, gate = P[:, :N], up = P[:, N:], C = silu(gate) * up;
 *   dswiglu (the SwiGLU backward, fused into the product that gives its incoming gradient): P = dA (M, N),
 *     aux = gu (M, 2N) the forward's gate | up, C (M, 2N): C[:, j] = P u silu'(g), C[:, N + j] = P silu(g)
 *     with silu'(g) = s (1 + g (1 - s)), s = sigmoid(g);
 *   then C += residual (when the spec has it). P is also stored to `pre` when the spec asks (the
 *   SwiGLU backward needs gate and up). Rows [row_begin, row_end) are computed, so callers parallelise
 *   over row blocks. The "blas" core calls `sgemm` per tile; the "micro" core is generated code.
 * Working memory comes from the caller: `scratch` holds at least lmcore_gemm_scratch_floats() floats
 * (a kernel never allocates: a fresh allocation per call would fault its pages in every time).
 * Packed B, shared by every thread of one product: a kernel whose lmcore_gemm_packed_panels() is P > 0
 * reads B only from `packed_b` (lmcore_gemm_packed_floats() floats), which the caller fills first by
 * calling lmcore_gemm_pack_b(args, packed, q_begin, q_end) over panels [0, P) (in parallel, any split),
 * and only then runs lmcore_gemm_epilogue on the row blocks. Kernels with P = 0 ignore packed_b. */
typedef void (*lmcore_sgemm_fn)(int b_trans, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                                const float* b, int64_t ldb, float* c, int64_t ldc); /* C = A op(B), beta 0 */

typedef struct lmcore_gemm_args {
  const float* a;           /* (M, K), row stride lda */
  const float* b;           /* (K, NB) or (NB, K), row stride ldb */
  float* c;                 /* (M, N), row stride ldc */
  float* pre;               /* (M, NB), row stride ldp; written only when the spec stores it */
  const float* bias;        /* (NB); read only when the spec has a bias */
  const float* residual;    /* (M, N), row stride ldr; read only when the spec has a residual */
  lmcore_sgemm_fn sgemm;    /* single-threaded sgemm, for the "blas" core */
  float* scratch;           /* lmcore_gemm_scratch_floats() floats, private to this call */
  const float* packed_b;    /* lmcore_gemm_packed_floats() floats filled by lmcore_gemm_pack_b */
  const float* aux;         /* (M, 2N), row stride ldx: gate | up, read only by the dswiglu epilogue */
  int64_t lda, ldb, ldc, ldp, ldr, ldx;
  int64_t row_begin, row_end;
} lmcore_gemm_args;

typedef void (*lmcore_gemm_fn)(const lmcore_gemm_args*);
typedef int64_t (*lmcore_gemm_scratch_floats_fn)(void);
typedef void (*lmcore_gemm_pack_b_fn)(const lmcore_gemm_args*, float* packed, int64_t q_begin, int64_t q_end);

typedef int (*lmcore_kernel_abi_version_fn)(void);
typedef const char* (*lmcore_kernel_spec_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LMCORE_CODEGEN_KERNEL_ABI_H_ */
