// lmcore::dist::launch: the ranks' environment and prefixed output, a failure stopping the others
// (SIGTERM, then SIGKILL after the grace), restarts, signals to the launcher, a program that does not
// exist, and options refused before anything starts.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "lmcore/core/error.h"
#include "lmcore/dist/launch.h"
#include "tests/dist/multiprocess.h"

namespace lmcore::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs launch() with the ranks' output going to two files; returns {status, stdout, stderr}.
struct Outcome {
  int status = -1;
  std::string out, err;
  double seconds = 0;
};

Outcome run(LaunchOptions o) {
  const std::string dir = testing::fresh_dir("launch");
  const int out = ::open((dir + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  const int err = ::open((dir + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  o.stdout_fd = out;
  o.stderr_fd = err;
  Outcome r;
  const auto t0 = Clock::now();
  r.status = launch(o);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(out);
  ::close(err);
  r.out = slurp(dir + "/out");
  r.err = slurp(dir + "/err");
  return r;
}

LaunchOptions sh(const std::string& script, int nproc) {
  LaunchOptions o;
  o.command = {"sh", "-c", script};  // found on PATH
  o.nproc = nproc;
  return o;
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(Launch, EveryRankGetsItsEnvironmentAndItsLinesArePrefixed) {
  LaunchOptions o = sh("echo rank=$LMCORE_RANK local=$LMCORE_LOCAL_RANK world=$LMCORE_WORLD_SIZE "
                       "lws=$LMCORE_LOCAL_WORLD_SIZE node=$LMCORE_NODE_RANK store=$LMCORE_STORE "
                       "restart=${LMCORE_RESTART_COUNT:-none} py=$PYTHONUNBUFFERED; echo oops >&2; printf 'no newline'",
                       3);
  o.nnodes = 2;
  o.node_rank = 1;
  o.store = "file:///tmp/lmcore-launch-test-store";
  const Outcome r = run(o);
  EXPECT_EQ(r.status, 0) << r.err;
  for (int rank = 3; rank < 6; ++rank) {
    EXPECT_TRUE(contains(r.out, fmt::format("[rank {}] rank={} local={} world=6 lws=3 node=1 "
                                            "store=file:///tmp/lmcore-launch-test-store restart=none py=1\n",
                                            rank, rank, rank - 3)))
        << r.out;
    EXPECT_TRUE(contains(r.out, fmt::format("[rank {}] no newline\n", rank))) << r.out;
    EXPECT_TRUE(contains(r.err, fmt::format("[rank {}] oops\n", rank))) << r.err;
  }
}

TEST(Launch, TheDefaultStoreIsAFreshDirectoryRemovedAtTheEnd) {
  const Outcome r = run(sh("echo $LMCORE_STORE; test -d ${LMCORE_STORE#file://}", 2));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  const auto at = r.out.find("[rank 0] file://");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string dir = r.out.substr(at + 16, r.out.find('\n', at) - at - 16);
  EXPECT_TRUE(contains(dir, "lmcore-launch-")) << dir;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(Launch, AFailedRankStopsTheOthersWithTermThenKill) {
  // Rank 1 fails once the others are running; rank 0 ignores SIGTERM, so it takes the SIGKILL that
  // follows the grace period; rank 2 ends at the SIGTERM.
  const std::string dir = testing::fresh_dir("launch-stop");
  LaunchOptions o = sh(fmt::format("touch {0}/up-$LMCORE_RANK; "
                                   "if [ $LMCORE_RANK = 1 ]; then while [ ! -e {0}/up-0 ] || [ ! -e {0}/up-2 ]; do "
                                   "sleep 0.01; done; exit 7; fi; "
                                   "if [ $LMCORE_RANK = 0 ]; then trap '' TERM; fi; exec sleep 30",
                                   dir),
                       3);
  o.kill_grace = std::chrono::milliseconds(300);
  const Outcome r = run(o);
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_TRUE(contains(r.err, "lmcore launch: rank 1 exited with status 7; stopping the other ranks")) << r.err;
  EXPECT_LT(r.seconds, 10.0);
}

TEST(Launch, KeepGoingLetsTheOthersFinish) {
  LaunchOptions o = sh("if [ $LMCORE_RANK = 0 ]; then exit 5; fi; sleep 0.3; echo finished", 3);
  o.keep_going = true;
  const Outcome r = run(o);
  EXPECT_EQ(r.status, 5);
  EXPECT_TRUE(contains(r.out, "[rank 1] finished") && contains(r.out, "[rank 2] finished")) << r.out;
  EXPECT_TRUE(contains(r.err, "rank 0 exited with status 5 (--keep-going)")) << r.err;
}

TEST(Launch, AFailedRankIsStartedAgainWithItsRestartCount) {
  LaunchOptions o = sh("echo run ${LMCORE_RESTART_COUNT:-0}; "
                       "if [ $LMCORE_RANK = 1 ] && [ ${LMCORE_RESTART_COUNT:-0} -lt 2 ]; then exit 3; fi",
                       2);
  o.restart_failed = 2;
  const Outcome r = run(o);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 1] run 0\n") && contains(r.out, "[rank 1] run 1\n") &&
              contains(r.out, "[rank 1] run 2\n"))
      << r.out;
  EXPECT_TRUE(contains(r.err, "rank 1 exited with status 3; starting it again (2 of 2)")) << r.err;
  EXPECT_FALSE(contains(r.out, "[rank 0] run 1")) << r.out;
}

TEST(Launch, AProcessARankLeftRunningIsNotWaitedForBeyondTheGrace) {
  // The background sleep inherits the rank's output pipe and holds it open for 30 s.
  LaunchOptions o = sh("(sleep 30; echo late) & echo started", 1);
  o.kill_grace = std::chrono::milliseconds(300);
  const Outcome r = run(o);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] started\n")) << r.out;
  EXPECT_LT(r.seconds, 10.0);
}

TEST(Launch, AProgramThatDoesNotExistFailsThatRankWith127) {
  LaunchOptions o;
  o.command = {"lmcore-no-such-program", "x"};
  o.nproc = 2;
  const Outcome r = run(o);
  EXPECT_EQ(r.status, 127);
  EXPECT_TRUE(contains(r.err, "lmcore launch: cannot run 'lmcore-no-such-program': No such file or directory")) << r.err;
}

TEST(Launch, ASignalToTheLauncherStopsTheRanksAndTheOldHandlerComesBack) {
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  const std::string dir = testing::fresh_dir("launch-signal");
  std::thread sender([&] {
    while (!std::filesystem::exists(dir + "/up-0") || !std::filesystem::exists(dir + "/up-1")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(::getpid(), SIGTERM);
  });
  const Outcome r = run(sh(fmt::format("touch {}/up-$LMCORE_RANK; exec sleep 30", dir), 2));
  sender.join();
  EXPECT_EQ(r.status, 128 + SIGTERM);
  EXPECT_LT(r.seconds, 10.0);
  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(Launch, BadOptionsAreRefusedBeforeAnythingStarts) {
  auto refused = [](LaunchOptions o, const std::string& needle) {
    try {
      launch(o);
      ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), needle)) << e.what();
    }
  };
  LaunchOptions ok = sh("exit 9", 1);
  LaunchOptions o = ok;
  o.command.clear();
  refused(o, "no command");
  o = ok;
  o.nproc = 0;
  refused(o, "nproc (--nproc) 0 must be in [1, 4096]");
  o = ok;
  o.nnodes = 2;
  o.node_rank = 2;
  o.store = "redis://127.0.0.1:1";
  refused(o, "node_rank (--node-rank) 2 must be in [0, nnodes 2)");
  o = ok;
  o.nnodes = 2;
  refused(o, "needs a store shared by every machine");
  o = ok;
  o.store = "tcp://x";
  refused(o, "store (--store): 'tcp://x': unknown store 'tcp', expected file:///path or redis://host:port");
  o.store = "file://relative/dir";
  refused(o, "store (--store): 'file://relative/dir': expected file:///absolute/path (three slashes, no host)");
  o.store = "redis://";
  refused(o, "store (--store)");
  o.store = "redis://127.0.0.1:6379/db";
  refused(o, "store (--store): 'redis://127.0.0.1:6379/db': a redis store takes no path, found '/db'");
  o = ok;
  o.restart_failed = -1;
  refused(o, "restart_failed (--restart-failed) -1 must be >= 0");
}

}  // namespace
}  // namespace lmcore::dist
