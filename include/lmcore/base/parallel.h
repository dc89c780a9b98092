// lmcore/base/parallel.h — parallel loops over an index range on lmcore's own thread pool.
//
//   parallel_for(0, rows, /*grain=*/16, [&](int64_t begin, int64_t end) { for (...) ... });
//
// The range is cut into at most num_threads() contiguous chunks of at least `grain` indices; the cut
// depends only on (begin, end, grain, num_threads()), so a kernel that reduces within chunks gives
// the same bits on every run at the same thread count. A parallel_for inside another runs serially
// on the calling thread (no oversubscription). The first exception thrown by fn is rethrown to the caller
// once the running chunks return; chunks not yet started are skipped, and the pool keeps no copy of it.
#pragma once

#include <cstdint>
#include <functional>

namespace lmcore {

// The most threads a pool may have (LMCORE_NUM_THREADS, set_num_threads): far past any core count,
// well below what the OS refuses to start (set_num_threads(10^6) ended in "Resource temporarily
// unavailable" from std::thread).
inline constexpr int kMaxThreads = 4096;
// Threads used by parallel_for: LMCORE_NUM_THREADS if set (1..kMaxThreads), else the number of cores.
int num_threads();
// Overrides the thread count for the rest of the process (1 <= n <= kMaxThreads).
void set_num_threads(int n);
// True while running inside a parallel_for body.
bool in_parallel_region();

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

// Like parallel_for, but the range is cut into up to kBalancedChunksPerThread * num_threads() chunks
// (each at least `grain`) that the threads take one at a time: when the OS deschedules one thread
// (other processes on the cores), the others take its remaining chunks and the loop waits for one
// small chunk, not for a fixed half of the work. For loops whose chunks write disjoint results and
// set up little per chunk. The cut depends only on (begin, end, grain, num_threads()), as above.
inline constexpr int kBalancedChunksPerThread = 8;
void parallel_for_balanced(std::int64_t begin, std::int64_t end, std::int64_t grain,
                           const std::function<void(std::int64_t, std::int64_t)>& fn);

}  // namespace lmcore
