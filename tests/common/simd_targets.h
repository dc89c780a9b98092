// Running a kernel on every SIMD target, on arrays fenced by unmapped pages.
//
//   for_each_simd_target([&] { ...calls of lmcore kernels, which dispatch to the target... });
//   GuardedArray<float> x(n, Fence::after);   // x.data()[n] is an unmapped page: reading it faults
//
// for_each_simd_target runs its body once per Highway target that lmcore compiled, this CPU runs and
// LMCORE_CPU_CAPABILITY allows (AVX-512, AVX2, SSE4, SSSE3, the portable fallback), naming the target
// in failures. A kernel that reads or writes one element past its array (a whole-vector load in a
// tail, say) dies of SIGSEGV on a GuardedArray instead of reading what happens to lie there.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lmcore/core/cpu_capability.h"

namespace lmcore::testing {

template <typename Body>
void for_each_simd_target(Body body) {
  const std::int64_t usable = internal::usable_simd_targets();
  ASSERT_NE(usable, 0);
  // The mock ends with this function however it returns (an ASSERT below returns early), so a failure
  // does not leave the tests after it on one target.
  struct EndMock {
    ~EndMock() { hwy::SetSupportedTargetsForTest(0); }
  } end_mock;
  for (std::int64_t t = usable; t != 0; t &= t - 1) {
    const std::int64_t target = t & -t;
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(std::string("SIMD target ") + hwy::TargetName(target));
    ASSERT_EQ(internal::dispatched_simd_target(), target);
    body();
  }
}

// True when a and b hold the same elements bit for bit (NaN payloads and signed zeros included).
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Which end of the array touches an unmapped page.
enum class Fence { before, after };

// n elements of T (uninitialised unless given) directly before or after an unmapped page; the other
// end has one too, a page or less away.
template <typename T>
class GuardedArray {
 public:
  GuardedArray(std::int64_t n, Fence fence) : page_(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))) {
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
    const std::size_t data_pages = (bytes + page_ - 1) / page_;
    size_ = (data_pages + 2) * page_;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base_ = static_cast<char*>(p);
    EXPECT_EQ(::mprotect(base_, page_, PROT_NONE), 0);
    EXPECT_EQ(::mprotect(base_ + size_ - page_, page_, PROT_NONE), 0);
    data_ = reinterpret_cast<T*>(fence == Fence::before ? base_ + page_ : base_ + size_ - page_ - bytes);
    n_ = n;
  }
  GuardedArray(const std::vector<T>& values, Fence fence) : GuardedArray(static_cast<std::int64_t>(values.size()), fence) {
    if (!values.empty()) std::memcpy(data_, values.data(), values.size() * sizeof(T));
  }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;
  ~GuardedArray() { ::munmap(base_, size_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::vector<T> to_vector() const { return std::vector<T>(data_, data_ + n_); }

 private:
  std::size_t page_, size_ = 0;
  char* base_ = nullptr;
  T* data_ = nullptr;
  std::int64_t n_ = 0;
};

}  // namespace lmcore::testing
