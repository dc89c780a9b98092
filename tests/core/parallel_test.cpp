// The thread pool: jobs spread over the pool's threads, also in a child forked after the pool started
// (fork() copies only the calling thread; the child must get working threads, not a serial or stuck pool).
#include <sys/wait.h>
#include <unistd.h>

#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "lmcore/core/parallel.h"

namespace lmcore {
namespace {

// Distinct threads that ran chunks of a job of `n` chunks that each take a few milliseconds.
std::size_t threads_used(int n) {
  std::mutex m;
  std::set<std::thread::id> ids;
  parallel_for(0, n, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
  });
  return ids.size();
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

}  // namespace
}  // namespace lmcore
