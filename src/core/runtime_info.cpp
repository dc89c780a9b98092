#include "lmcore/core/runtime_info.h"

#include <unistd.h>

#include <cstdint>

#include <fmt/format.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include "lmcore/core/cpu_capability.h"

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
}

namespace lmcore {

// Neither function calls hwy::SupportedTargets(): that would undo LMCORE_CPU_CAPABILITY (see
// src/core/cpu_capability.cpp).
std::string simd_target_name() { return hwy::TargetName(internal::dispatched_simd_target()); }

std::string simd_supported_targets() {
  std::string out;
  for (std::int64_t t = internal::usable_simd_targets(); t != 0; t &= t - 1) {
    if (!out.empty()) out += ' ';
    out += hwy::TargetName(t & -t);
  }
  return out;
}

std::string blas_info() { return fmt::format("{} (core {})", openblas_get_config(), openblas_get_corename()); }

int blas_num_threads() { return openblas_get_num_threads(); }

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace lmcore
