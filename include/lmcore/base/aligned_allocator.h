// A std allocator whose blocks start on a 64-byte (cache line) boundary, for buffers that vector kernels
// read with whole-line loads or write with streaming stores: malloc's large blocks start 16 bytes past
// a page, so every 64-byte load of such a buffer would straddle two lines.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <new>

namespace lmcore {

template <class T>
struct CacheAlignedAllocator {
  using value_type = T;
  static constexpr std::size_t kAlignment = 64;

  CacheAlignedAllocator() = default;
  template <class U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}

  T* allocate(std::size_t n) {
    // aligned_alloc wants a multiple of the alignment; a zero-length request still gets one line.
    const std::size_t bytes = std::max<std::size_t>(1, (n * sizeof(T) + kAlignment - 1) / kAlignment) * kAlignment;
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }

  template <class U>
  bool operator==(const CacheAlignedAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const CacheAlignedAllocator<U>&) const { return false; }
};

}  // namespace lmcore
