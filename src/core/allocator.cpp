#include "lmcore/core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "lmcore/core/error.h"

namespace lmcore {
namespace {

std::atomic<std::size_t> g_current{0};
std::atomic<std::size_t> g_peak{0};

void raise_peak(std::size_t now) noexcept {
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

void* allocate_bytes(std::size_t nbytes) {
  // aligned_alloc needs a size that is a multiple of the alignment; round up (and give 0 one block).
  const std::size_t rounded = (nbytes + kStorageAlignment - 1) / kStorageAlignment * kStorageAlignment;
  if (rounded < nbytes) fail("allocate: {} bytes overflows size_t when aligned", nbytes);
  void* ptr = std::aligned_alloc(kStorageAlignment, rounded == 0 ? kStorageAlignment : rounded);
  if (ptr == nullptr) fail("allocate: out of memory allocating {} bytes ({} bytes in use)", nbytes, current_bytes());
  raise_peak(g_current.fetch_add(nbytes, std::memory_order_relaxed) + nbytes);
  return ptr;
}

void free_bytes(void* ptr, std::size_t nbytes) noexcept {
  if (ptr == nullptr) return;
  std::free(ptr);
  g_current.fetch_sub(nbytes, std::memory_order_relaxed);
}

std::size_t current_bytes() noexcept { return g_current.load(std::memory_order_relaxed); }
std::size_t peak_bytes() noexcept { return g_peak.load(std::memory_order_relaxed); }
void reset_peak_bytes() noexcept { g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace lmcore
