// lmcore/codegen/rmsnorm.h — RMSNorm forward/backward kernels generated for one hidden size and dtype
// pair, with the precompiled generic kernel as the fallback.
//
//   inp (N, C) io dtype [+ residual (N, C) io dtype] , weight (C) f32
//     -> out (N, C) out dtype, rstd (N) f32 [, residual_out (N, C) io dtype = inp + residual]
//   backward: dout (N, C) out dtype -> dinp (N, C) io dtype ADDED into, dweight (C) f32 ADDED into
//
//   codegen::RmsNormKernel k = codegen::RmsNormKernel::get({.hidden = 768, .io = DType::bf16});
//   k.forward(out, rstd, x, nullptr, nullptr, w, N);
//   k.backward(dx, dw, dout, x, w, rstd, N);
//   if (!k.generated()) log(k.why_generic());
//
// Rows are split over lmcore's thread pool. The backward's dweight is summed in fixed row chunks whose
// partials are added in chunk order, so results depend only on the thread count. bf16 values are
// rounded to nearest even (NaN -> 0xFFFF), arithmetic is f32. Formulas: kernel_abi.h. The generic and the
// generated kernels agree within f32 rounding before the final rounding to the out dtype.
#pragma once

#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "lmcore/codegen/kernel_abi.h"
#include "lmcore/codegen/spec.h"

namespace lmcore::codegen {

class RmsNormKernel {
 public:
  // Compiles (or loads from the cache) the kernel for `spec`, blocking; the variant is the autotuned
  // one (or the default with LMCORE_AUTOTUNE=0) unless `variant` is given. Never throws for a missing
  // or broken compiler: the generic kernel is used and why_generic() says why. Throws Error for an
  // invalid spec (hidden < 1, eps not finite or negative).
  static RmsNormKernel get(const RmsNormSpec& spec, const Options& options = Options::from_env(),
                           const RmsNormVariant* variant = nullptr);
  // The same in the background (compiles run in their worker processes): the caller may wait on the
  // future, or run generic(spec) until it is ready, e.g.
  //   auto pending = RmsNormKernel::get_async(spec);  RmsNormKernel k = RmsNormKernel::generic(spec);
  //   ... if (pending.valid() && pending.wait_for(0s) == std::future_status::ready) k = pending.get();
  // Throws Error at once for an invalid spec.
  static std::future<RmsNormKernel> get_async(const RmsNormSpec& spec, const Options& options = Options::from_env());
  // The precompiled generic kernel, no compiler involved.
  static RmsNormKernel generic(const RmsNormSpec& spec);

  void forward(void* out, float* rstd, const void* inp, const void* residual, void* residual_out,
               const float* weight, std::int64_t N) const;
  void backward(void* dinp, float* dweight, const void* dout, const void* inp, const float* weight,
                const float* rstd, std::int64_t N) const;

  bool generated() const { return fwd_ != nullptr; }
  const std::string& why_generic() const { return why_; }
  const RmsNormSpec& spec() const { return spec_; }
  const std::string& variant() const { return variant_; }

 private:
  RmsNormSpec spec_;
  lmcore_rmsnorm_forward_fn fwd_ = nullptr;
  lmcore_rmsnorm_backward_fn bwd_ = nullptr;
  std::string why_, variant_;
};

// The default variant for this CPU: widest vectors, 4 accumulators.
RmsNormVariant default_rmsnorm_variant();

// The candidates autotuning times: vectors of the widest width the CPU has and of 8 lanes (AVX-512 may
// lower the clock), each with 1, 2, 4 and 8 accumulators.
std::vector<RmsNormVariant> rmsnorm_candidates();

// The variant get() uses for `spec`: the cached tuning winner for this spec, compiler and CPU, a tuning
// run when there is none (candidates compiled in parallel, forward + backward of each timed in a forked
// child on ~4 MiB of rows, three interleaved rounds, the winner and every time recorded in the cache's
// tune/), or the default when autotuning is off (LMCORE_AUTOTUNE=0) or no compiler is found.
RmsNormVariant rmsnorm_variant_for(const RmsNormSpec& spec, const Options& options);

// "W=16 U=4" -> the variant; throws Error for anything else.
RmsNormVariant parse_rmsnorm_variant(const std::string& s);

namespace detail {
// The precompiled generic kernels: the same ABI with the spec as a run-time argument.
void generic_rmsnorm_forward(const RmsNormSpec& spec, const lmcore_rmsnorm_forward_args& a);
void generic_rmsnorm_backward(const RmsNormSpec& spec, const lmcore_rmsnorm_backward_args& a);
}  // namespace detail

}  // namespace lmcore::codegen
