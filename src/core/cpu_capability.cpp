// LMCORE_CPU_CAPABILITY: a ceiling on Highway's run-time target choice (hwy::DisableTargets, which
// makes the next dispatch choose again), and a probe that reports the target dispatch really picks.
//
// hwy::SupportedTargets() is called once, here, before any cap: in Highway 1.0.3 each call re-detects
// the CPU and points dispatch at the best target the CPU has, cap or no cap (it leaves the masking to
// the dispatcher that calls it). runtime_info's call of it, from `lmcore info` or the trainer's
// report, had put every kernel after it back on AVX-512, so a capped run changed targets half way.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/cpu_capability.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lmcore::internal::HWY_NAMESPACE {
// The copy of this function that dispatch calls names its own target.
std::int64_t DispatchedTarget() { return HWY_TARGET; }
}  // namespace lmcore::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <hwy/targets.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

#include "lmcore/core/cpu_capability.h"
#include "lmcore/core/error.h"
#include "lmcore/core/internal/simd_dispatch.h"

namespace lmcore {
namespace {

struct Capability {
  const char* name;
  const char* aliases[2];  // Highway's or other spellings, or nullptr
  std::int64_t best;       // the best Highway target allowed
  // Every target better than the cap (the bits below its own); the fallbacks (EMU128, SCALAR) always
  // stay, so Highway always has a target to call.
  constexpr std::int64_t disabled() const { return best - 1; }
};

// Best first. Highway numbers targets so that a lower bit is a newer, wider target.
constexpr Capability kCapabilities[] = {
    {"avx512", {"avx3", nullptr}, HWY_AVX3},
    {"avx2", {nullptr, nullptr}, HWY_AVX2},
    {"sse4", {nullptr, nullptr}, HWY_SSE4},
    {"ssse3", {nullptr, nullptr}, HWY_SSSE3},
    {"default", {"scalar", "emu128"}, HWY_EMU128},
};

// The targets this CPU runs (and lmcore compiled), read once.
std::int64_t cpu_targets() {
  static const std::int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return targets;
}
// The targets the cap switches off (0: no cap).
std::atomic<std::int64_t> g_disabled{0};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

void set_disabled(std::int64_t disabled) {
  cpu_targets();  // before DisableTargets: see the top of this file
  g_disabled.store(disabled);
  hwy::DisableTargets(disabled);
}

}  // namespace

std::string cpu_capability_names() {
  std::string out;
  for (const Capability& c : kCapabilities) {
    if (!out.empty()) out += ", ";
    out += c.name;
  }
  return out;
}

std::string cpu_capability() {
  internal::apply_cpu_capability_env();
  const std::int64_t disabled = g_disabled.load();
  for (const Capability& c : kCapabilities)
    if (c.disabled() == disabled) return c.name;
  return "none";
}

void limit_cpu_capability(std::string_view name) {
  const std::string want = lower(name);
  if (want == "none") return set_disabled(0);
  for (const Capability& c : kCapabilities)
    for (const char* spelling : {c.name, c.aliases[0], c.aliases[1]})
      if (spelling != nullptr && want == spelling) return set_disabled(c.disabled());
  fail("cpu capability: '{}' is not one of {} (or none)", name, cpu_capability_names());
}

namespace internal {

std::atomic<bool> g_cpu_capability_env_applied{false};

void apply_cpu_capability_env_once() {
  static const bool applied = [] {
    if (const char* env = std::getenv("LMCORE_CPU_CAPABILITY"); env != nullptr && *env != '\0') {
      try {
        limit_cpu_capability(env);
      } catch (const Error&) {
        fail("environment variable LMCORE_CPU_CAPABILITY: '{}' is not one of {}", env, cpu_capability_names());
      }
    }
    return true;
  }();
  g_cpu_capability_env_applied.store(applied, std::memory_order_release);
}

std::int64_t usable_simd_targets() {
  apply_cpu_capability_env();
  return cpu_targets() & ~g_disabled.load();
}

HWY_EXPORT(DispatchedTarget);

std::int64_t dispatched_simd_target() { return LMCORE_DISPATCH(DispatchedTarget)(); }

}  // namespace internal
}  // namespace lmcore
#endif  // HWY_ONCE
