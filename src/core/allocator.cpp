#include "lmcore/core/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "lmcore/base/sanitizer.h"
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

// Blocks of at least kHugeBlock bytes are mapped directly, on a 2 MiB boundary, and marked for
// transparent huge pages (where the kernel offers them through madvise): a fresh 150 MB gradient
// then costs ~75 page faults instead of ~37000, which on the 2-core test machine took 35 of the 45 ms
// of an embedding backward (V = 50257, D = 768, f32). glibc maps such sizes directly anyway (its mmap
// threshold tops out at 32 MiB), so only the alignment and the advice are new. Not under
// AddressSanitizer, which checks heap blocks only.
constexpr bool kMapHugeBlocks = !kAddressSanitizer;
constexpr std::size_t kHugeBlock = std::size_t{32} << 20, kHugePage = std::size_t{2} << 20;

std::size_t mapped_length(std::size_t rounded) { return (rounded + kHugePage - 1) / kHugePage * kHugePage; }

void* map_block(std::size_t rounded) {
  // Over-map by one huge page, then trim both ends so the block starts on a 2 MiB boundary.
  const std::size_t len = mapped_length(rounded);
  void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + len + kHugePage;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, len, MADV_HUGEPAGE);  // advice only: without THP the block works the same
  return p;
}

// Freed huge blocks are kept for the next request of the same mapped length: a training step frees
// and requests the same large buffers every step, and a fresh mapping is zeroed by the kernel page by
// page (11% of a bf16 training step of the default model went to clear_page). A request that finds no
// block of its length first returns every cached block to the system, so the cache never holds memory
// beside a mapping of another size; it holds at most kCacheBytes.
constexpr std::size_t kCacheBytes = std::size_t{1} << 30;

struct BlockCache {
  std::mutex mu;
  std::vector<std::pair<void*, std::size_t>> blocks;  // (start, mapped length), oldest first
  std::size_t bytes = 0;

  void* take(std::size_t len) {
    std::vector<std::pair<void*, std::size_t>> release;
    void* hit = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = blocks.rbegin(); it != blocks.rend(); ++it)
        if (it->second == len) {
          hit = it->first;
          bytes -= len;
          blocks.erase(std::next(it).base());
          break;
        }
      if (hit == nullptr) {
        release.swap(blocks);
        bytes = 0;
      }
    }
    for (const auto& [p, n] : release) munmap(p, n);
    return hit;
  }

  void give(void* p, std::size_t len) {
    std::vector<std::pair<void*, std::size_t>> release;
    {
      std::lock_guard<std::mutex> lock(mu);
      blocks.emplace_back(p, len);
      bytes += len;
      while (bytes > kCacheBytes) {
        release.push_back(blocks.front());
        bytes -= blocks.front().second;
        blocks.erase(blocks.begin());
      }
    }
    for (const auto& [q, n] : release) munmap(q, n);
  }

  std::size_t clear() {
    std::vector<std::pair<void*, std::size_t>> release;
    std::size_t freed = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      release.swap(blocks);
      freed = bytes;
      bytes = 0;
    }
    for (const auto& [p, n] : release) munmap(p, n);
    return freed;
  }
};

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;  // never destroyed: blocks may be freed during static destruction
  return *cache;
}

void* take_block(std::size_t rounded) {
  if (void* p = block_cache().take(mapped_length(rounded))) return p;
  return map_block(rounded);
}

}  // namespace

std::size_t release_cached_blocks() noexcept { return kMapHugeBlocks ? block_cache().clear() : 0; }

void* allocate_bytes(std::size_t nbytes) {
  // aligned_alloc needs a size that is a multiple of the alignment; round up (and give 0 one block).
  const std::size_t rounded = (nbytes + kStorageAlignment - 1) / kStorageAlignment * kStorageAlignment;
  if (rounded < nbytes) fail("allocate: {} bytes overflows size_t when aligned", nbytes);
  void* ptr = kMapHugeBlocks && rounded >= kHugeBlock
                  ? take_block(rounded)
                  : std::aligned_alloc(kStorageAlignment, rounded == 0 ? kStorageAlignment : rounded);
  if (ptr == nullptr) fail("allocate: out of memory allocating {} bytes ({} bytes in use)", nbytes, current_bytes());
  raise_peak(g_current.fetch_add(nbytes, std::memory_order_relaxed) + nbytes);
  return ptr;
}

void free_bytes(void* ptr, std::size_t nbytes) noexcept {
  if (ptr == nullptr) return;
  const std::size_t rounded = (nbytes + kStorageAlignment - 1) / kStorageAlignment * kStorageAlignment;
  if (kMapHugeBlocks && rounded >= kHugeBlock) block_cache().give(ptr, mapped_length(rounded));
  else std::free(ptr);
  g_current.fetch_sub(nbytes, std::memory_order_relaxed);
}

std::size_t current_bytes() noexcept { return g_current.load(std::memory_order_relaxed); }
std::size_t peak_bytes() noexcept { return g_peak.load(std::memory_order_relaxed); }
void reset_peak_bytes() noexcept { g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace lmcore
