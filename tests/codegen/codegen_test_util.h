// Helpers of the codegen tests: temporary directories, fake compilers, test options, random buffers, and the
// element-wise bound check.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/compiler.h"
#include "lmcore/codegen/reference.h"
#include "lmcore/codegen/runtime.h"
#include "lmcore/codegen/spec.h"
#include "tests/base/base_test_util.h"

namespace lmcore::codegen::testing {

using base::testing::TempDir;

// An executable /bin/sh script.
inline std::string write_script(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
  return path;
}

// The persistent cache of the sweep tests: $LMCORE_TEST_KERNEL_CACHE when set (scripts/test points the
// release and the sanitizer builds' tests at one, so the second finds the kernels the first compiled:
// the same source, compiler and flags, and so the same keys), else one in this build's directory.
inline std::string test_kernel_cache() {
  const char* env = std::getenv("LMCORE_TEST_KERNEL_CACHE");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(LMCORE_TEST_KERNEL_CACHE);
}

// The options of the tests: the environment's compiler, the persistent test cache (or `dir`).
inline Options test_options(const std::string& dir = test_kernel_cache()) {
  Options o = Options::from_env();
  o.cache_dir = dir;
  o.enabled = true;
  // Generous: on a shared machine compilers may be paused (SIGSTOP) for a while by others' benchmarks;
  // the timeout itself is tested with a hanging fake compiler.
  o.compile_timeout_seconds = 600;
  // Tests name their variants (or the defaults); the autotuning tests turn tuning on themselves.
  o.autotune = false;
  return o;
}

// Checks the tuning records under `dir`: exactly one, naming `winner` first and a time for every one of
// `candidates` (their variant strings).
inline void expect_one_tuning_record(const std::string& dir, const KernelCache& cache, const std::string& winner,
                                     const std::vector<std::string>& candidates) {
  std::size_t records = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/tune")) {
    ++records;
    const auto rec = cache.read_tuning(e.path().filename().string());
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->substr(0, rec->find(';')), winner) << *rec;
    for (const auto& v : candidates) EXPECT_NE(rec->find(v + "="), std::string::npos) << *rec;
  }
  EXPECT_EQ(records, 1u);
}

// Whether the environment has a compiler; when not, the generic kernels must be used and say why.
inline bool have_compiler(std::string* why = nullptr) {
  std::string w;
  const bool ok = find_compiler(test_options(), &w).has_value();
  if (why) *why = w;
  return ok;
}

// Uniform values in [lo, hi) stored in the dtype (bf16 buffers hold rounded values).
inline std::vector<unsigned char> random_buffer(std::mt19937& rng, std::int64_t n, DType t, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<unsigned char> b(static_cast<std::size_t>(n) * dtype_size(t));
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (t == DType::f32) reinterpret_cast<float*>(b.data())[i] = v;
    else reinterpret_cast<std::uint16_t*>(b.data())[i] = reference::to_bf16(v);
  }
  return b;
}

inline double value_at(const std::vector<unsigned char>& b, std::int64_t i, DType t) {
  if (t == DType::f32) return reinterpret_cast<const float*>(b.data())[i];
  return reference::from_bf16(reinterpret_cast<const std::uint16_t*>(b.data())[i]);
}

// got within bound[i] of want everywhere; reports the worst elements. `name` names the tensor.
inline ::testing::AssertionResult within_bounds(const char* name, const std::vector<double>& got, const std::vector<double>& want,
                                         const std::vector<double>& bound) {
  std::size_t bad = 0, worst = 0, largest = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const double ratio = bound[i] > 0 ? err / bound[i] : (err > 0 ? INFINITY : 0);
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) { worst_ratio = ratio; worst = i; }
    if (std::abs(want[i]) > std::abs(want[largest])) largest = i;
  }
  // The bound must be able to see a 1% error at the largest element.
  if (!(0.01 * std::abs(want[largest]) > bound[largest]))
    return ::testing::AssertionFailure() << name << ": bound " << bound[largest] << " at [" << largest
                                         << "] would accept a 1% error of " << want[largest];
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << name << ": " << bad << " of " << got.size() << " elements out of bounds; worst ["
                                       << worst << "] got " << got[worst] << " want " << want[worst] << " (error "
                                       << std::abs(got[worst] - want[worst]) << ", bound " << bound[worst] << ")";
}

}  // namespace lmcore::codegen::testing
