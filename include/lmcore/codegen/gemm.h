// lmcore/codegen/gemm.h — GEMM with a fused epilogue (bias, SiLU, GELU, the SwiGLU gate product,
// residual add), generated for one (N, K) and epilogue, autotuned per shape and CPU.
//
//   A (M, K) f32, B (NB, K) (b_trans, a torch Linear weight) or (K, NB) f32, NB = 2N for swiglu
//     -> C (M, N) = act(A op(B) + bias) [+ residual];  optionally P (M, NB) = A op(B) + bias
//
//   codegen::GemmSpec spec{.N = F, .K = C, .act = codegen::Act::swiglu, .store_pre = true};
//   auto k = codegen::GemmKernel::get(spec, /*M=*/tokens);   // tuned (or cached winner), or generic
//   k.run({.a = h, .lda = C, .b = w_gate_up, .ldb = C, .c = act, .ldc = F, .pre = gu, .ldp = 2 * F}, tokens);
//
// The epilogue is applied to each output tile right after its product, while the tile is in cache, so
// C is written once and P (the pre-activation, needed by a backward) is never read back. Rows are split
// over lmcore's thread pool in blocks of 16; each block runs a single-threaded kernel, so results are
// the same on every run at the same thread count. The "micro" core packs B once per run (the threads
// split the panels), then the row blocks run on the shared copy. Autotuning compiles the candidate variants (blas
// tiles and generated micro-kernels), times each in a forked child (a candidate that crashes or hangs
// is dropped, the caller survives) on the real shape run as run() runs it, on every thread of the pool
// (a variant that wins on one core can lose when both share the caches and the memory), and records
// the winner in the cache's tune/ for this spec, row-count bucket, thread count, compiler and CPU;
// LMCORE_AUTOTUNE=0 takes the default variant untimed.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "lmcore/codegen/kernel_abi.h"
#include "lmcore/codegen/spec.h"

namespace lmcore::codegen {

struct GemmOperands {
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float* c = nullptr;
  std::int64_t ldc = 0;
  float* pre = nullptr;  // when spec.store_pre
  std::int64_t ldp = 0;
  const float* bias = nullptr;      // when spec.bias
  const float* residual = nullptr;  // when spec.residual
  std::int64_t ldr = 0;
  const float* aux = nullptr;       // (M, 2N) gate | up, when spec.act == Act::dswiglu
  std::int64_t ldx = 0;
};

class GemmKernel {
 public:
  // `M` is the row count the kernel will mostly see (it picks the tuning record); any M can be run.
  // Never throws for a missing or broken compiler (generic kernel, why_generic() says why); throws
  // Error for an invalid spec.
  static GemmKernel get(const GemmSpec& spec, std::int64_t M, const Options& options = Options::from_env(),
                        const GemmVariant* variant = nullptr);
  // The same in the background; see RmsNormKernel::get_async. Throws Error at once for an invalid spec.
  static std::future<GemmKernel> get_async(const GemmSpec& spec, std::int64_t M,
                                           const Options& options = Options::from_env());
  static GemmKernel generic(const GemmSpec& spec);

  // Throws Error when an operand the spec needs is null or a leading dimension is too small.
  void run(const GemmOperands& ops, std::int64_t M) const;

  bool generated() const { return fn_ != nullptr; }
  const std::string& why_generic() const { return why_; }
  const GemmSpec& spec() const { return spec_; }
  const std::string& variant() const { return variant_; }

 private:
  GemmSpec spec_;
  lmcore_gemm_fn fn_ = nullptr;
  lmcore_gemm_pack_b_fn pack_b_ = nullptr;
  std::int64_t scratch_floats_ = 0;  // per call (per thread)
  std::int64_t packed_panels_ = 0, packed_floats_ = 0;  // B packed once per run, shared by the threads
  std::string why_, variant_;
};

// The variant get() would use for (spec, M): the cached tuning winner, a tuning run (which compiles
// and times the candidates) when there is none, or the default when autotuning is off.
GemmVariant gemm_variant_for(const GemmSpec& spec, std::int64_t M, const Options& options);

// The variant used without tuning, and the candidates tuning times.
GemmVariant default_gemm_variant();
std::vector<GemmVariant> gemm_candidates(const GemmSpec& spec);

// Times each loaded candidate in a forked child (seconds per call of `time_one`; a child that crashes,
// fails or runs past timeout_seconds is dropped) and returns the index of the fastest, or -1 when none
// finished. `time_one(i)` runs in the child.
int time_candidates_in_children(std::size_t n, const std::function<double(std::size_t)>& time_one,
                                double timeout_seconds, std::vector<double>* seconds = nullptr);

namespace detail {
// a.scratch: generic_gemm_scratch_floats(spec) floats.
void generic_gemm(const GemmSpec& spec, const lmcore_gemm_args& a);
// Checks a spec (N, K >= 1; dswiglu without bias, residual or stored product); throws Error.
void check_gemm_spec(const GemmSpec& spec);
std::int64_t generic_gemm_scratch_floats(const GemmSpec& spec);
// The single-threaded sgemm handed to kernels (C = A op(B), beta 0), over OpenBLAS.
void sgemm_callback(int b_trans, std::int64_t M, std::int64_t N, std::int64_t K, const float* a, std::int64_t lda,
                    const float* b, std::int64_t ldb, float* c, std::int64_t ldc);
}  // namespace detail

}  // namespace lmcore::codegen
