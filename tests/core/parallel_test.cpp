// The thread pool: jobs spread over the pool's threads, also in a child forked after the pool started
// (fork() copies only the calling thread; the child must get working threads, not a serial or stuck pool),
// and exceptions that reach the caller with nothing of them kept by the pool.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"

namespace lmcore {
namespace {

// Distinct threads that ran chunks of a job of `n` chunks. Each chunk waits (up to 10 s) until all n
// have started, so a working pool of n threads runs one chunk per thread however late the scheduler
// wakes a worker (a fixed 20 ms per chunk let a busy machine's running thread take two chunks: the test
// failed 1 run in 5 under load); a serial pool runs them one after another, each waiting out its 10 s.
std::size_t threads_used(int n) {
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> started{0};
  parallel_for(0, n, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      started.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < n && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
  });
  return ids.size();
}

// set_num_threads(10^6) was accepted and the next loop failed in std::thread ("Resource temporarily
// unavailable"); the limit is the one LMCORE_NUM_THREADS has, and a refused count changes nothing.
TEST(Parallel, ThreadCountsPastTheLimitAreRefused) {
  const int before = num_threads();
  for (int n : {0, -1, kMaxThreads + 1, 1000000}) {
    try {
      set_num_threads(n);
      ADD_FAILURE() << n << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("set_num_threads: expected n in [1, 4096], found " + std::to_string(n)),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(num_threads(), before);
}

TEST(Parallel, JobsUseEveryThreadAlsoInAForkedChild) {
  const int saved = num_threads();
  set_num_threads(3);
  ASSERT_EQ(threads_used(3), 3u);  // the pool's workers now exist in this process
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Exit status: the threads the child's job ran on (3 when the pool was rebuilt, 1 when serial).
    ::_exit(num_threads() == 3 ? static_cast<int>(threads_used(3)) : 100);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << "threads used by a job in the forked child";
  EXPECT_EQ(threads_used(3), 3u);  // the parent's pool is untouched
  set_num_threads(saved);
}

// An exception that owns something, as a Python exception owns its traceback: the test checks when
// it is released.
struct OwningError : std::runtime_error {
  explicit OwningError(std::shared_ptr<int> p) : std::runtime_error("owning"), payload(std::move(p)) {}
  std::shared_ptr<int> payload;
};

class ParallelThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = num_threads();
    set_num_threads(GetParam());
  }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

TEST_P(ParallelThreads, ExceptionReachesTheCallerAndIsNotKept) {
  std::weak_ptr<int> watch;
  for (std::int64_t thrower : {std::int64_t{0}, std::int64_t{GetParam() - 1}}) {
    SCOPED_TRACE(thrower);
    try {
      parallel_for(0, GetParam(), 1, [&](std::int64_t lo, std::int64_t) {
        if (lo == thrower) {
          auto p = std::make_shared<int>(7);
          watch = p;
          throw OwningError(std::move(p));
        }
      });
      FAIL() << "no exception";
    } catch (const OwningError& e) {
      EXPECT_EQ(*e.payload, 7);
    }
    // Handled and gone: nothing in the pool still refers to it.
    EXPECT_TRUE(watch.expired());
  }
  // The pool still runs jobs, every index once.
  std::atomic<std::int64_t> sum{0};
  parallel_for(0, 1000, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

INSTANTIATE_TEST_SUITE_P(Threads, ParallelThreads, ::testing::Values(1, 2, 4));

// parallel_for_balanced: the same cut on every call, each index once, chunks of at least `grain`, up to
// kBalancedChunksPerThread per thread.
TEST_P(ParallelThreads, BalancedCutCoversTheRangeOnceAndIsDeterministic) {
  for (const auto& c : {std::pair<std::int64_t, std::int64_t>{1000, 1}, {1000, 7}, {5, 1}, {64, 64}, {3, 10}}) {
    const std::int64_t n = c.first, grain = c.second;  // (clang 14 cannot capture structured bindings)
    auto cut = [&] {
      std::mutex m;
      std::set<std::pair<std::int64_t, std::int64_t>> chunks;
      parallel_for_balanced(10, 10 + n, grain, [&](std::int64_t lo, std::int64_t hi) {
        std::lock_guard<std::mutex> lock(m);
        chunks.emplace(lo, hi);
      });
      return chunks;
    };
    const auto first = cut();
    const std::int64_t want = GetParam() == 1 ? 1
                                              : std::min<std::int64_t>(std::int64_t{GetParam()} * kBalancedChunksPerThread,
                                                                       (n + grain - 1) / grain);
    EXPECT_EQ(static_cast<std::int64_t>(first.size()), want) << n << " " << grain;
    std::int64_t next = 10;
    for (const auto& [lo, hi] : first) {
      EXPECT_EQ(lo, next);
      EXPECT_TRUE(hi - lo >= grain || first.size() == 1) << lo << " " << hi;
      next = hi;
    }
    EXPECT_EQ(next, 10 + n);
    EXPECT_EQ(cut(), first);
  }
}

// A chunk that throws: the exception reaches the caller and no chunk starts after it (the other
// thread stops taking its own and the thrower's chunks). Chunk 0 throws at once; the others take 2 ms.
TEST(Parallel, BalancedLoopStopsTakingChunksAfterAThrow) {
  const int saved = num_threads();
  set_num_threads(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for_balanced(0, 2 * kBalancedChunksPerThread, 1,
                                     [&](std::int64_t lo, std::int64_t) {
                                       ran.fetch_add(1);
                                       if (lo == 0) throw std::runtime_error("chunk 0");
                                       std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                     }),
               std::runtime_error);
  EXPECT_LE(ran.load(), 4) << "of " << 2 * kBalancedChunksPerThread << " chunks";
  set_num_threads(saved);
}

// The point of the balanced cut: a thread held up in its chunk does not hold up the rest, which the
// other threads take. Chunk 0 waits (up to 10 s) until every other chunk has finished: with a fixed
// split into one chunk per thread, its thread's other chunks could not run meanwhile.
TEST(Parallel, BalancedLoopRunsOnWhileOneThreadIsHeldUp) {
  const int saved = num_threads();
  for (int threads : {2, 4}) {
    set_num_threads(threads);
    const std::int64_t n = std::int64_t{threads} * kBalancedChunksPerThread;
    std::atomic<std::int64_t> finished{0};
    std::atomic<std::int64_t> seen_by_first{-1};
    parallel_for_balanced(0, n, 1, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        if (i == 0) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (finished.load() < n - 1 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          seen_by_first = finished.load();
        } else {
          finished.fetch_add(1);
        }
      }
    });
    EXPECT_EQ(seen_by_first.load(), n - 1) << threads << " threads";
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace lmcore
