// PageOffsetBuffer: a small array placed at the same offset within a 4 KiB page as another one.
//
// x86 cores first compare a load's address with the stores still in flight by its low 12 bits only; a
// match makes the load wait until the store is resolved (4K aliasing), even when the full addresses
// differ. A kernel that streams rows and loads or stores a short vector beside them (RMSNorm's weight
// and its dweight partials) hits this on every vector when the short one sits a few hundred bytes
// ahead of the rows within the page: the f32 RMSNorm backward at 4096 x 4096 ran at 4.4 ms instead of
// 3.4 on Zen 5, depending only on where malloc had put the weight. Placed at the rows' own offset,
// element i of both has the same low bits, and a load never matches a store other than its own element's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "lmcore/base/aligned_allocator.h"

namespace lmcore {

template <class T>
class PageOffsetBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr std::uintptr_t kPage = 4096;

  // n zero-initialised elements whose first one has `like`'s offset within a page (rounded down to T's
  // alignment).
  PageOffsetBuffer(std::size_t n, const void* like) : storage_(n * sizeof(T) + kPage, 0) {
    const auto base = reinterpret_cast<std::uintptr_t>(storage_.data());
    const std::uintptr_t want = reinterpret_cast<std::uintptr_t>(like) & (kPage - 1) & ~(alignof(T) - 1);
    data_ = reinterpret_cast<T*>(storage_.data() + ((want - base) & (kPage - 1)));
  }
  // A copy of src[0, n) placed like `like`.
  PageOffsetBuffer(const T* src, std::size_t n, const void* like) : PageOffsetBuffer(n, like) {
    std::memcpy(data_, src, n * sizeof(T));
  }

  // Moving keeps data() valid: the storage's heap block moves with it.
  PageOffsetBuffer(PageOffsetBuffer&&) noexcept = default;
  PageOffsetBuffer& operator=(PageOffsetBuffer&&) noexcept = default;

  T* data() { return data_; }
  const T* data() const { return data_; }

 private:
  std::vector<unsigned char, CacheAlignedAllocator<unsigned char>> storage_;
  T* data_ = nullptr;
};

}  // namespace lmcore
