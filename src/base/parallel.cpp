// A small fixed thread pool. One job runs at a time (callers serialise on a mutex); the calling thread
// takes chunks too, so num_threads() == 1 never touches the pool.
//
// Hand-offs spin briefly before sleeping: a worker that finished a job watches for the next one, and
// the caller watches for the last chunk, for up to kSpin each, before blocking on a condition
// variable. A futex wake-up took tens of microseconds on the loaded 2-core test machine, which on a
// ~0.7 ms reduction left the second thread starting late (0.86x torch's sum, whose OpenMP workers
// spin the same way); back-to-back parallel regions now find the other thread awake.
#include "lmcore/base/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lmcore/base/error.h"

namespace lmcore {
namespace {

thread_local bool t_in_parallel = false;

constexpr std::chrono::microseconds kSpin{100};

// Spins until ready() or kSpin has passed; returns ready().
template <typename Ready>
bool spin_until(Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return ready();
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

int default_threads() {
  if (const char* env = std::getenv("LMCORE_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != nullptr && *end == '\0' && n >= 1 && n <= kMaxThreads) return static_cast<int>(n);
    fail("LMCORE_NUM_THREADS: expected an integer in [1, {}], found '{}'", kMaxThreads, env);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {}
  ~ThreadPool() { stop_workers(); }

  int threads() const { return threads_; }

  void resize(int threads) {
    std::lock_guard<std::mutex> job_lock(job_mutex_);
    stop_workers();
    threads_ = threads;
  }

  void run(std::int64_t chunks, const std::function<void(std::int64_t)>& chunk_fn) {
    std::lock_guard<std::mutex> job_lock(job_mutex_);
    start_workers();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &chunk_fn;
      total_ = chunks;
      next_.store(0);
      done_ = 0;
      error_ = nullptr;
      failed_.store(false);
      complete_.store(false, std::memory_order_relaxed);
      ++generation_;
      generation_seen_.store(generation_, std::memory_order_release);
    }
    wake_.notify_all();
    work_on_current_job();
    spin_until([&] { return complete_.load(std::memory_order_acquire); });
    std::unique_lock<std::mutex> lock(mutex_);
    // Wait for every chunk and for every worker to leave the job, so the next job cannot be mixed up
    // with a straggler of this one.
    finished_.wait(lock, [&] { return done_ == total_ && active_ == 0; });
    job_ = nullptr;
    // The pool must not keep the exception after handing it on: it may own objects of the caller
    // (a Python exception and its traceback, released under the GIL), and a pool that outlives the
    // interpreter would destroy them at exit, after Python is gone (a hang at exit).
    if (std::exception_ptr error = std::exchange(error_, nullptr)) {
      lock.unlock();
      std::rethrow_exception(error);
    }
  }

 private:
  void start_workers() {
    if (!workers_.empty() || threads_ <= 1) return;
    stopping_ = false;
    stopping_seen_.store(false, std::memory_order_relaxed);
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      stopping_seen_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] {
        return generation_seen_.load(std::memory_order_acquire) != seen || stopping_seen_.load(std::memory_order_relaxed);
      });
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      work_on_current_job();
    }
  }

  void work_on_current_job() {
    const std::function<void(std::int64_t)>* job;
    std::int64_t total;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job = job_;
      total = total_;
      if (job == nullptr) return;
      ++active_;
    }
    t_in_parallel = true;
    std::int64_t finished_here = 0;
    for (std::int64_t c = next_.fetch_add(1); c < total; c = next_.fetch_add(1)) {
      // After a failure the remaining chunks are only counted: their work would be thrown away, and
      // a chunk that calls back into Python would keep the caller waiting for nothing.
      if (!failed_.load(std::memory_order_relaxed)) {
        try {
          (*job)(c);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!error_) error_ = std::current_exception();
          failed_.store(true, std::memory_order_relaxed);
        }
      }
      ++finished_here;
    }
    t_in_parallel = false;
    std::lock_guard<std::mutex> lock(mutex_);
    done_ += finished_here;
    --active_;
    if (done_ == total_ && active_ == 0) {
      complete_.store(true, std::memory_order_release);
      finished_.notify_all();
    }
  }

  int threads_;
  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  std::vector<std::thread> workers_;
  const std::function<void(std::int64_t)>* job_ = nullptr;
  std::int64_t total_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::int64_t done_ = 0;
  int active_ = 0;  // threads inside work_on_current_job
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};  // a chunk of the current job threw
  // Copies of generation_, stopping_ and "every chunk done, no thread inside" that the spinning
  // threads read without the mutex (written under it).
  std::atomic<std::uint64_t> generation_seen_{0};
  std::atomic<bool> stopping_seen_{false};
  std::atomic<bool> complete_{false};
};

// The pool lives behind a pointer so that a forked child can get a fresh one: fork() copies only the
// calling thread, so the child's copy of the pool has no workers (its jobs would run serially on the
// caller) and may hold a mutex some worker had locked. The child's old pool is abandoned, not destroyed
// (its std::thread objects name threads that do not exist there).
ThreadPool*& pool_slot() {
  static ThreadPool* slot = [] {
    ::pthread_atfork(nullptr, nullptr, [] { pool_slot() = new ThreadPool(pool_slot()->threads()); });
    return new ThreadPool(default_threads());
  }();
  return slot;
}

ThreadPool& pool() { return *pool_slot(); }

}  // namespace

int num_threads() { return pool().threads(); }

void set_num_threads(int n) {
  LMCORE_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: expected n in [1, {}], found {}", kMaxThreads, n);
  pool().resize(n);
}

bool in_parallel_region() { return t_in_parallel; }

namespace {

// How many chunks n elements are cut into: at most max_chunks, each of at least `grain` elements.
// Chunk c covers [c*n/chunks, (c+1)*n/chunks) whichever thread runs it, so a loop's result does not
// depend on the scheduling.
std::int64_t chunk_count(std::int64_t n, std::int64_t grain, std::int64_t max_chunks) {
  grain = std::max<std::int64_t>(grain, 1);
  return std::min<std::int64_t>(max_chunks, (n + grain - 1) / grain);
}

// Cuts [begin, end) into at most max_chunks even chunks of at least `grain` and runs them on the pool
// (each thread takes the next chunk not yet taken).
void run_chunks(std::int64_t begin, std::int64_t end, std::int64_t grain, std::int64_t max_chunks,
                const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (end <= begin) return;
  const std::int64_t n = end - begin;
  const std::int64_t chunks = chunk_count(n, grain, max_chunks);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  // Static, even split: chunk c covers [begin + c*n/chunks, begin + (c+1)*n/chunks).
  pool().run(chunks, [&](std::int64_t c) {
    const std::int64_t lo = begin + c * n / chunks;
    const std::int64_t hi = begin + (c + 1) * n / chunks;
    fn(lo, hi);
  });
}

}  // namespace

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn) {
  run_chunks(begin, end, grain, t_in_parallel ? 1 : num_threads(), fn);
}

void parallel_for_balanced(std::int64_t begin, std::int64_t end, std::int64_t grain,
                           const std::function<void(std::int64_t, std::int64_t)>& fn) {
  const std::int64_t threads = t_in_parallel ? 1 : num_threads();
  if (end <= begin) return;
  const std::int64_t n = end - begin;
  const std::int64_t chunks = chunk_count(n, grain, threads * kBalancedChunksPerThread);
  if (threads == 1 || chunks <= 1) {
    fn(begin, end);
    return;
  }
  // The chunks in `lanes` contiguous runs, one per thread: each thread works through its own run in
  // order, then takes what is left of the others' (so a descheduled thread holds up one chunk). Taking
  // the chunks round-robin instead had the threads read interleaved 4 MB pieces, and a sum of 64 MiB
  // streamed from DRAM 1.2x slower on Zen 5 than with two contiguous halves.
  const std::int64_t lanes = std::min(threads, chunks);
  const auto lane_begin = [&](std::int64_t l) { return l * chunks / lanes; };
  std::unique_ptr<std::atomic<std::int64_t>[]> next(new std::atomic<std::int64_t>[static_cast<std::size_t>(lanes)]);
  for (std::int64_t l = 0; l < lanes; ++l) next[static_cast<std::size_t>(l)].store(lane_begin(l));
  std::atomic<bool> failed{false};  // after a chunk throws, no further chunk starts (as in the pool)
  pool().run(lanes, [&](std::int64_t own) {
    for (std::int64_t k = 0; k < lanes; ++k) {
      const std::int64_t l = (own + k) % lanes, stop = lane_begin(l + 1);
      std::atomic<std::int64_t>& take = next[static_cast<std::size_t>(l)];
      for (std::int64_t c = take.fetch_add(1); c < stop && !failed.load(std::memory_order_relaxed);
           c = take.fetch_add(1)) {
        try {
          fn(begin + c * n / chunks, begin + (c + 1) * n / chunks);
        } catch (...) {
          failed.store(true, std::memory_order_relaxed);
          throw;
        }
      }
    }
  });
}

}  // namespace lmcore
