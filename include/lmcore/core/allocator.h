// lmcore/core/allocator.h — 64-byte-aligned tensor storage allocation with byte accounting.
//
// Every owned tensor storage goes through allocate_bytes/free_bytes, so current and peak bytes of
// tensor storage are known at any time. Benchmarks read them to report memory:
//
//   reset_peak_bytes();
//   run_the_op();
//   std::size_t extra = peak_bytes() - bytes_before;
#pragma once

#include <cstddef>

namespace lmcore {

inline constexpr std::size_t kStorageAlignment = 64;

// Allocates `nbytes` (0 is allowed and returns a unique non-null pointer) aligned to 64 bytes.
// Throws Error when the system is out of memory, naming the size.
void* allocate_bytes(std::size_t nbytes);
// Frees memory from allocate_bytes; `nbytes` must be the size it was allocated with.
void free_bytes(void* ptr, std::size_t nbytes) noexcept;

// Bytes of tensor storage allocated now, and the most allocated at once since the last reset.
std::size_t current_bytes() noexcept;
std::size_t peak_bytes() noexcept;
// Sets the peak to the current value.
void reset_peak_bytes() noexcept;
// Blocks of 32 MiB and more are kept after free_bytes for the next request of the same size (up to
// 1 GiB; a request of another size releases them first). Returns the cached bytes to the system and
// says how many there were.
std::size_t release_cached_blocks() noexcept;

}  // namespace lmcore
