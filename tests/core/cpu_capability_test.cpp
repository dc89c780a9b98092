// LMCORE_CPU_CAPABILITY's function form, limit_cpu_capability: each cap puts the kernels on the best
// target at or below it, reading the target list (lmcore info, the trainer's report) leaves it there,
// "none" lifts it, and a bad name is an error that lists the good ones. The environment variable itself
// is tested from outside the process (tests/python/test_package.py), and the kernel tests run under
// each cap as the ctest variants simd_<capability>.<part>.
#include "lmcore/core/cpu_capability.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <string>

#include "lmcore/core/error.h"
#include "lmcore/core/runtime_info.h"

namespace lmcore {
namespace {

TEST(CpuCapability, EachCapPutsTheKernelsOnTheBestTargetBelowItAndKeepsThemThere) {
  const std::string before = cpu_capability();
  limit_cpu_capability("none");
  EXPECT_EQ(cpu_capability(), "none");
  const std::int64_t all = internal::usable_simd_targets();
  ASSERT_NE(all, 0);
  EXPECT_EQ(internal::dispatched_simd_target(), all & -all);
  const struct {
    const char* name;
    std::int64_t cap;
  } caps[] = {{"avx512", HWY_AVX3}, {"AVX2", HWY_AVX2}, {"sse4", HWY_SSE4}, {"ssse3", HWY_SSSE3}, {"default", HWY_EMU128}};
  for (const auto& c : caps) {
    SCOPED_TRACE(c.name);
    limit_cpu_capability(c.name);
    const std::int64_t allowed = all & ~(c.cap - 1);  // this CPU's targets no better than the cap
    const std::int64_t want = allowed & -allowed;
    EXPECT_EQ(internal::usable_simd_targets(), allowed);
    EXPECT_EQ(internal::dispatched_simd_target(), want);
    // Reading the target list and name must not move the kernels: Highway 1.0.3's SupportedTargets()
    // re-points dispatch at the CPU's best target, which is why runtime_info does not call it.
    EXPECT_FALSE(simd_supported_targets().empty());
    EXPECT_EQ(simd_target_name(), hwy::TargetName(want));
    EXPECT_EQ(internal::dispatched_simd_target(), want);
  }
  EXPECT_EQ(cpu_capability(), "default");
  try {
    limit_cpu_capability("avx1024");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'avx1024' is not one of avx512, avx2, sse4, ssse3, default"), std::string::npos)
        << e.what();
  }
  limit_cpu_capability(before);
  EXPECT_EQ(cpu_capability(), before);
}

}  // namespace
}  // namespace lmcore
