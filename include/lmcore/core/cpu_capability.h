// lmcore/core/cpu_capability.h — a ceiling on the SIMD target of lmcore's vector kernels.
//
// lmcore's Highway kernels (reductions, casts, comparisons, softmax rows, the model's layers, AdamW)
// are compiled once per x86 target and the best one the CPU runs is picked at run time. As with
// torch's ATEN_CPU_CAPABILITY, the environment variable LMCORE_CPU_CAPABILITY caps that choice:
//
//   LMCORE_CPU_CAPABILITY=avx2 lmcore train ...     # AVX2 kernels even on an AVX-512 machine
//
// Values, best first: avx512 (Highway's AVX3), avx2, sse4, ssse3, default (the portable fallback;
// also "scalar"); case does not matter, and Highway's own names (AVX3, SCALAR, EMU128) are accepted.
// A cap above what the CPU has changes nothing. It is read once, before the first kernel runs; any
// other value is an error naming the variable and the accepted values. It lets one machine run (and
// the test suite check) the kernels another CPU would get. lmcore::codegen compiles its generated
// kernels under the same cap (-mno-avx512f, -mno-avx, ...); oneDNN has its own, ONEDNN_MAX_CPU_ISA.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace lmcore {

// The accepted capability names, best first, for messages and --help texts.
std::string cpu_capability_names();

// The cap in force: one of cpu_capability_names(), or "none".
std::string cpu_capability();

// Caps the kernels' SIMD target at `name` (one of cpu_capability_names(), or "none" to lift the cap;
// throws on anything else) from the next kernel call on; call it before running kernels, not while
// other threads run them. simd_target_name() then reports the target in use.
void limit_cpu_capability(std::string_view name);

namespace internal {
extern std::atomic<bool> g_cpu_capability_env_applied;
void apply_cpu_capability_env_once();
// Applies LMCORE_CPU_CAPABILITY the first time it is called; throws, and keeps throwing, while the
// variable holds a bad value. Every kernel dispatch calls it, so after the first it is one load.
inline void apply_cpu_capability_env() {
  if (!g_cpu_capability_env_applied.load(std::memory_order_acquire)) apply_cpu_capability_env_once();
}
// Highway's target bits that kernels may dispatch to now: the CPU's, compiled in, under the cap.
// Read this instead of hwy::SupportedTargets(), which would undo the cap (see cpu_capability.cpp).
std::int64_t usable_simd_targets();
// The Highway target (HWY_AVX2, ...) that a kernel called now runs: asked of a dispatched function.
std::int64_t dispatched_simd_target();
}  // namespace internal

}  // namespace lmcore
