// lmcore/core/runtime_info.h — what this process runs on: SIMD target, BLAS library and threads, memory.
#pragma once

#include <cstdint>
#include <string>

namespace lmcore {

// The Highway target that dynamic dispatch picks on this CPU, e.g. "AVX2" or "AVX3" (after
// LMCORE_CPU_CAPABILITY, lmcore/core/cpu_capability.h).
std::string simd_target_name();
// Every Highway target compiled in that this CPU supports and the cap allows, best first, e.g.
// "AVX3 AVX2 SSE4".
std::string simd_supported_targets();
// The BLAS library's self-description (OpenBLAS: its config string and core name).
std::string blas_info();
// Threads the BLAS library uses.
int blas_num_threads();
// This machine's physical memory in bytes, or 0 when the system does not say. Planners compare their
// needs against it to refuse, with the sizes, what could only end in the out-of-memory killer.
std::uint64_t physical_memory_bytes();

}  // namespace lmcore
