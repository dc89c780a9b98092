// DeferredSignals: signals wait while one is alive and arrive when the outermost ends; fault signals
// stay open; the thread's mask comes back as it was.
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <initializer_list>

#include "lmcore/core/deferred_signals.h"

namespace lmcore {
namespace {

std::atomic<int> g_usr1{0};
extern "C" void count_usr1(int) { g_usr1.fetch_add(1); }

sigset_t current_mask() {
  sigset_t m;
  pthread_sigmask(SIG_BLOCK, nullptr, &m);
  return m;
}

TEST(DeferredSignals, ASignalWaitsForTheOutermostScopeAndIsNotLost) {
  struct sigaction sa {}, old {};
  sa.sa_handler = count_usr1;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_usr1 = 0;
  EXPECT_FALSE(DeferredSignals::active());
  {
    const DeferredSignals outer;
    EXPECT_TRUE(DeferredSignals::active());
    {
      const DeferredSignals inner;
      pthread_kill(pthread_self(), SIGUSR1);
      EXPECT_EQ(g_usr1.load(), 0);
    }
    EXPECT_TRUE(DeferredSignals::active());
    EXPECT_EQ(g_usr1.load(), 0);  // the inner scope's end does not let it through
  }
  EXPECT_FALSE(DeferredSignals::active());
  EXPECT_EQ(g_usr1.load(), 1);
  sigaction(SIGUSR1, &old, nullptr);
}

TEST(DeferredSignals, FaultSignalsStayOpenAndTheMaskIsRestored) {
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  sigset_t before;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr2, &before), 0);  // the caller's own blocked signal
  {
    const DeferredSignals held;
    const sigset_t m = current_mask();
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGPROF, SIGCHLD, SIGPIPE})
      EXPECT_EQ(sigismember(&m, s), 1) << "signal " << s << " should wait";
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT})
      EXPECT_EQ(sigismember(&m, s), 0) << "fault signal " << s << " should stay open";
  }
  const sigset_t after = current_mask();
  EXPECT_EQ(sigismember(&after, SIGUSR2), 1);  // still the caller's
  EXPECT_EQ(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
  EXPECT_EQ(sigismember(&after, SIGUSR1), sigismember(&before, SIGUSR1));
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

}  // namespace
}  // namespace lmcore
