// Fault tolerance on loopback: kill -9 of a rank in the middle of all_reduce and of
// reduce_scatter_single (survivors error within timeout + 2 s naming op, seq and the dead rank,
// shrink, compute correctly, and re-admit a restarted rank), a rank that never arrives (timeout),
// and abort() from another thread.
#include <gtest/gtest.h>

#include <filesystem>

#include "lmcore/dist/flight_recorder.h"
#include "lmcore/dist/process_group.h"
#include "tests/dist/multiprocess.h"

namespace lmcore::dist {
namespace {

using Clock = std::chrono::steady_clock;
using testing::fresh_store;
using testing::group_options;
using testing::spawn;
using testing::wait_all;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Checks all_reduce(sum) and reduce_scatter_single(sum) on `pg` with values that depend on the rank.
void check_group_computes(ProcessGroup& pg, const std::string& what) {
  const int n = pg.world_size(), r = pg.rank();
  Tensor t = Tensor::full({100003}, r + 1, DType::f32);
  pg.all_reduce(t);
  const float want = static_cast<float>(n * (n + 1) / 2);
  for (float v : t.to_vector<float>()) RANK_CHECK(v == want, "{}: all_reduce gave {}, expected {}", what, v, want);
  Tensor in = Tensor::empty({4 * n}, DType::i64);
  for (int i = 0; i < 4 * n; ++i) in.data<std::int64_t>()[i] = i * (r + 1);
  Tensor out = Tensor::empty({4}, DType::i64);
  pg.reduce_scatter_single(out, in);
  for (int i = 0; i < 4; ++i) {
    const std::int64_t want_i = static_cast<std::int64_t>(r * 4 + i) * (n * (n + 1) / 2);
    RANK_CHECK(out.data<std::int64_t>()[i] == want_i, "{}: reduce_scatter[{}] = {}, expected {}", what, i,
               out.data<std::int64_t>()[i], want_i);
  }
}

enum class Victim { all_reduce, reduce_scatter };

// world ranks; `victim` kills itself while its big collective is in flight; survivors detect, shrink,
// compute, then a restarted process joins at reconfigure().
void kill_shrink_rejoin(int world, int victim, Victim which) {
  const std::string store = fresh_store("kill");
  const auto timeout = std::chrono::milliseconds(4000);
  const char* opname = which == Victim::all_reduce ? "all_reduce" : "reduce_scatter_single";
  const std::int64_t big = 4 << 20;  // 16 MiB of f32 per rank: long enough to die in the middle
  auto big_call = [&](ProcessGroup& pg) -> Work {
    Tensor in = Tensor::full({big}, 1, DType::f32);
    if (which == Victim::all_reduce) return pg.all_reduce_async(in);
    Tensor out = Tensor::empty({big / pg.world_size()}, DType::f32);
    return pg.reduce_scatter_single_async(out, in);
  };
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pids.push_back(spawn([&, r] {
      ProcessGroup pg(group_options(r, world, store, timeout));
      check_group_computes(pg, "before the failure");
      if (r == victim) {
        // Killed as soon as the call is issued, not after a delay: the whole 16 MiB ring takes ~10 ms on
        // loopback, so a victim that sleeps first (or is descheduled on a loaded machine) may already have
        // sent its share, and survivors would rightly complete the call.
        Work w = big_call(pg);
        raise(SIGKILL);
      }
      const auto t0 = Clock::now();
      bool failed = false;
      try {
        big_call(pg).wait();
      } catch (const DistError& e) {
        failed = true;
        const double ms = ms_since(t0);
        std::fprintf(stderr, "[rank %d] detected the failure of rank %d in %s after %.0f ms (timeout %lld ms): %s\n", r,
                     victim, opname, ms, static_cast<long long>(timeout.count()), e.what());
        RANK_CHECK(ms < timeout.count() + 2000.0, "error after {} ms, bound {} ms", ms, timeout.count() + 2000);
        RANK_CHECK(e.op() == opname, "op '{}'", e.op());
        RANK_CHECK(e.seq() == 2, "seq {}", e.seq());
        RANK_CHECK(e.missing_ranks() == std::vector<int>{victim}, "missing [{}]: {}", fmt::join(e.missing_ranks(), ","), e.what());
        const std::string msg = e.what();
        RANK_CHECK(msg.find(opname) != std::string::npos && msg.find("seq 2") != std::string::npos &&
                       msg.find(fmt::format("[{}]", victim)) != std::string::npos,
                   "message: {}", msg);
      }
      RANK_CHECK(failed, "rank {} saw no error", r);
      RANK_CHECK(pg.is_broken(), "group not marked broken");
      ShrinkOptions so;
      so.window = std::chrono::milliseconds(2000);
      ProcessGroup small = pg.shrink(so);
      RANK_CHECK(small.world_size() == world - 1 && small.generation() == 1, "shrunk to {} gen {}", small.world_size(),
                 small.generation());
      RANK_CHECK(small.rank() == (r < victim ? r : r - 1), "renumbered rank {} from {}", small.rank(), r);
      check_group_computes(small, "after shrink");

      // A restarted rank is waiting in join(): admit it.
      ShrinkOptions ro;
      ro.window = std::chrono::milliseconds(20000);
      ro.min_joiners = 1;
      ProcessGroup full = small.reconfigure(ro);
      RANK_CHECK(full.world_size() == world && full.generation() == 2, "reconfigured to {} gen {}", full.world_size(),
                 full.generation());
      RANK_CHECK(full.rank() == small.rank(), "survivor rank changed at reconfigure: {}", full.rank());
      check_group_computes(full, "after rejoin");
    }, fmt::format("rank {}", r)));
  }
  // Restart the victim once it is dead.
  int st = 0;
  ASSERT_EQ(waitpid(pids[victim], &st, 0), pids[victim]);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  pid_t joiner = spawn([&] {
    GroupOptions o = group_options(-1, -1, store, timeout);
    ProcessGroup pg = ProcessGroup::join(o, std::chrono::seconds(30));
    RANK_CHECK(pg.rank() == world - 1 && pg.world_size() == world && pg.generation() == 2, "joined as {} of {} gen {}",
               pg.rank(), pg.world_size(), pg.generation());
    check_group_computes(pg, "joiner");
  }, "restarted rank");
  std::vector<pid_t> rest;
  for (int r = 0; r < world; ++r) {
    if (r != victim) rest.push_back(pids[r]);
  }
  rest.push_back(joiner);
  for (int s : wait_all(rest)) EXPECT_TRUE(testing::exited_ok(s)) << testing::describe_exit(s);
}

// Gloo writes with writev(): with SIGPIPE at its default action, a survivor writing to the dead rank
// was killed silently (seen as a rank that neither reported the failure nor answered the roll call).
// A group turns the default into "ignore" and leaves a handler the program installed alone.
void count_sigpipe(int) {}

TEST(FaultTolerance, GroupIgnoresSigpipeUnlessTheProgramHandlesIt) {
  const std::string store = fresh_store("sigpipe");
  EXPECT_TRUE(testing::run_ranks(2, [&](int r) {
    struct sigaction mine {};
    mine.sa_handler = r == 0 ? SIG_DFL : count_sigpipe;
    sigemptyset(&mine.sa_mask);
    sigaction(SIGPIPE, &mine, nullptr);
    ProcessGroup pg(group_options(r, 2, store));
    struct sigaction now {};
    sigaction(SIGPIPE, nullptr, &now);
    if (r == 0) RANK_CHECK(now.sa_handler == SIG_IGN, "SIGPIPE still has its default action after the group");
    if (r == 1) RANK_CHECK(now.sa_handler == count_sigpipe, "the program's SIGPIPE handler was replaced");
    pg.barrier();
  }));
}

TEST(FaultTolerance, KillDuringAllReduceThenShrinkAndRejoin) { kill_shrink_rejoin(3, 2, Victim::all_reduce); }

TEST(FaultTolerance, KillDuringReduceScatterThenShrinkAndRejoin) { kill_shrink_rejoin(4, 1, Victim::reduce_scatter); }

// A survivor slowed down (as on a loaded machine) still counts: it is not named missing although it
// reaches the failed collective a second late, and shrink() waits for it; the dead rank costs shrink()
// no wait at all, since it never answered the roll call.
TEST(FaultTolerance, SlowSurvivorCountsAndTheDeadRankCostsShrinkNoWait) {
  const std::string store = fresh_store("slow");
  const auto timeout = std::chrono::milliseconds(4000);
  const int victim = 2;
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) {
    pids.push_back(spawn([&, r] {
      ProcessGroup pg(group_options(r, 3, store, timeout));
      pg.barrier();
      if (r == victim) raise(SIGKILL);
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      Tensor t = Tensor::full({1000}, 1, DType::f32);
      try {
        pg.all_reduce(t);
        RANK_CHECK(false, "all_reduce with a dead rank succeeded");
      } catch (const DistError& e) {
        RANK_CHECK(e.seq() == 1 && e.missing_ranks() == std::vector<int>{victim}, "seq {} missing [{}]: {}", e.seq(),
                   fmt::join(e.missing_ranks(), ","), e.what());
      }
      ShrinkOptions so;
      so.window = std::chrono::milliseconds(10000);
      const auto t0 = Clock::now();
      ProcessGroup small = pg.shrink(so);
      const double ms = ms_since(t0);
      std::fprintf(stderr, "[rank %d] shrink() without the dead rank took %.0f ms (window 10000 ms)\n", r, ms);
      RANK_CHECK(small.world_size() == 2 && small.rank() == r, "shrunk to rank {} of {}", small.rank(), small.world_size());
      RANK_CHECK(ms < 6000, "shrink() took {} ms: it waited for the dead rank", ms);
      check_group_computes(small, "after shrink");
    }, fmt::format("rank {}", r)));
  }
  const std::vector<int> st = wait_all(pids);
  EXPECT_TRUE(WIFSIGNALED(st[victim]) && WTERMSIG(st[victim]) == SIGKILL);
  EXPECT_TRUE(testing::exited_ok(st[0]));
  EXPECT_TRUE(testing::exited_ok(st[1]));
}

TEST(FaultTolerance, AbsentRankTimesOutNamingItAndTraceNamesIt) {
  const std::string store = fresh_store("absent");
  const std::string traces = testing::fresh_dir("absent-trace");
  const auto timeout = std::chrono::milliseconds(1000);
  EXPECT_TRUE(testing::run_ranks(3, [&](int r) {
    GroupOptions o = group_options(r, 3, store, timeout);
    o.trace_dir = traces;
    ProcessGroup pg(o);
    pg.barrier();
    if (r == 1) {  // alive but never calls the collective
      std::this_thread::sleep_for(std::chrono::milliseconds(3500));
      pg.dump_trace();
      return;
    }
    Tensor t = Tensor::full({1000}, 1, DType::f32);
    const auto t0 = Clock::now();
    try {
      pg.all_reduce(t);
      RANK_CHECK(false, "no error");
    } catch (const DistError& e) {
      const double ms = ms_since(t0);
      std::fprintf(stderr, "[rank %d] absent rank 1 detected after %.0f ms (timeout 1000 ms): %s\n", r, ms, e.what());
      RANK_CHECK(ms >= 900 && ms < timeout.count() + 2000.0, "error after {} ms", ms);
      RANK_CHECK(e.kind() == DistErrorKind::timeout || e.kind() == DistErrorKind::peer_failure, "kind {}",
                 static_cast<int>(e.kind()));
      RANK_CHECK(e.missing_ranks() == std::vector<int>{1}, "missing [{}]", fmt::join(e.missing_ranks(), ","));
    }
  }));
  // Dumps: ranks 0 and 2 on timeout, rank 1 on request. The analysis names seq 1 and rank 1.
  std::vector<TraceDump> dumps;
  for (const auto& f : std::filesystem::directory_iterator(traces)) dumps.push_back(load_trace_dump(f.path()));
  ASSERT_EQ(dumps.size(), 3u);
  const TraceAnalysis a = analyze_traces(dumps);
  EXPECT_FALSE(a.agree);
  EXPECT_EQ(a.first_seq, 1);
  EXPECT_EQ(a.op, "all_reduce");
  EXPECT_EQ(a.missing_ranks, std::vector<int>{1});
  EXPECT_NE(a.report.find("seq 1"), std::string::npos) << a.report;
  // Issue 13, defect 10: the dump written because the call failed shows it failed, with its end
  // time and error (it used to be dumped while still "started", with no end and no error).
  for (const TraceDump& d : dumps) {
    if (d.rank == 1) continue;
    ASSERT_FALSE(d.entries.empty()) << d.source;
    const TraceEntry& e = d.entries.back();
    // A survivor whose deadline comes a little later sees the other give up first (its connections
    // close): then its own call ends as a peer failure.
    EXPECT_TRUE(d.reason == "timeout" || d.reason == "peer_failure") << d.source << ": " << d.reason;
    EXPECT_EQ(e.seq, 1) << d.source;
    EXPECT_EQ(e.state, "failed") << d.source;
    EXPECT_GE(e.t_end, e.t_start) << d.source;
    EXPECT_GT(e.t_end, 0.0) << d.source;
    const std::string cause = d.reason == "timeout" ? "timed out after 1000 ms" : "a connection failed";
    EXPECT_NE(e.error.find("all_reduce (seq 1, generation 0, rank " + std::to_string(d.rank) + " of 3): " + cause),
              std::string::npos)
        << d.source << ": " << e.error;
    EXPECT_NE(e.error.find("the roll call within"), std::string::npos) << d.source << ": " << e.error;
  }
}

// CLOCK_MONOTONIC is one clock for every process of the machine: times taken in the ranks and in the
// test process compare directly.
std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void write_text(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  std::string text;
  char buf[256];
  for (std::size_t k; (k = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, k);
  std::fclose(f);
  return text;
}

// Issue 13, defect 13: how long a survivor blocked in a collective takes to report a peer that died
// (kill -9: the kernel resets its connections at once) or went silent (SIGSTOP: no reset, no answer).
// Survivors 0 and 1 block in all_reduce waiting for rank 2; the test process stops or kills rank 2
// once both are inside the call and compares its own clock with the time each survivor's error
// arrived. Before the fix a reset was reported only when the roll call's 2 s window had passed
// (2.0-2.1 s after the kill), a silent peer 1.5 s after the deadline.
enum class PeerFate { killed, stopped };

std::vector<double> detection_ms(PeerFate fate, std::chrono::milliseconds timeout) {
  const std::string store = fresh_store("detect");
  const std::string dir = testing::fresh_dir("detect-marks");
  const int victim = 2;
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) {
    pids.push_back(spawn([&, r] {
      GroupOptions o = group_options(r, 3, store, timeout);
      o.trace_dir = dir + "/traces";
      ProcessGroup pg(o);
      pg.barrier();
      if (r == victim) {
        write_text(fmt::format("{}/in-call-{}", dir, r), "");
        while (true) pause();  // never reaches the all_reduce
      }
      Tensor t = Tensor::full({1000}, 1, DType::f32);
      Work w = pg.all_reduce_async(t);
      write_text(fmt::format("{}/in-call-{}", dir, r), std::to_string(monotonic_ns()));
      try {
        w.wait();
        RANK_CHECK(false, "all_reduce without rank {} succeeded", victim);
      } catch (const DistError& e) {
        const std::int64_t at = monotonic_ns();
        write_text(fmt::format("{}/error-{}", dir, r), std::to_string(at));
        RANK_CHECK(e.missing_ranks() == std::vector<int>{victim}, "missing [{}]: {}", fmt::join(e.missing_ranks(), ","),
                   e.what());
        RANK_CHECK(e.seq() == 1 && e.op() == "all_reduce", "seq {} op {}", e.seq(), e.op());
        const DistErrorKind want = fate == PeerFate::killed ? DistErrorKind::peer_failure : DistErrorKind::timeout;
        // A survivor may see the other survivor give up (its connections close) before its own deadline.
        RANK_CHECK(e.kind() == want || (fate == PeerFate::stopped && e.kind() == DistErrorKind::peer_failure),
                   "kind {}: {}", static_cast<int>(e.kind()), e.what());
      }
    }, fmt::format("rank {}", r)));
  }
  // Both survivors inside the call, and a little more so that their receives are posted.
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (read_text(dir + "/in-call-0").empty() || read_text(dir + "/in-call-1").empty() ||
         !std::filesystem::exists(dir + "/in-call-2")) {
    if (Clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::int64_t event_ns = 0;
  if (fate == PeerFate::killed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    event_ns = monotonic_ns();
    kill(pids[victim], SIGKILL);
  } else {
    kill(pids[victim], SIGSTOP);
  }
  std::vector<int> st = wait_all({pids[0], pids[1]});
  if (fate == PeerFate::stopped) kill(pids[victim], SIGKILL);
  wait_all({pids[victim]});
  std::vector<double> out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(testing::exited_ok(st[r])) << "rank " << r << ": " << testing::describe_exit(st[r]);
    const std::string at = read_text(fmt::format("{}/error-{}", dir, r));
    if (at.empty()) continue;
    // Killed: from the kill. Stopped: from the survivor's own call, whose deadline is the event.
    const std::int64_t from = fate == PeerFate::killed ? event_ns : std::stoll(read_text(fmt::format("{}/in-call-{}", dir, r)));
    out.push_back(static_cast<double>(std::stoll(at) - from) / 1e6);
  }
  if (fate == PeerFate::killed) {
    // The victim wrote no dump; the survivors' dumps name the collective it died in (defect 9).
    std::vector<TraceDump> dumps;
    for (const auto& f : std::filesystem::directory_iterator(dir + "/traces")) dumps.push_back(load_trace_dump(f.path()));
    const TraceAnalysis a = analyze_traces(dumps);
    EXPECT_EQ(a.first_seq, 1) << a.report;
    EXPECT_EQ(a.op, "all_reduce") << a.report;
    EXPECT_EQ(a.missing_ranks, std::vector<int>{victim}) << a.report;
  }
  return out;
}

TEST(FaultTolerance, AConnectionResetIsReportedWithinHalfASecond) {
  // Target 0.5 s; the bound leaves room for a loaded machine (measured figures: see the notes).
  const auto ms = detection_ms(PeerFate::killed, std::chrono::seconds(20));
  ASSERT_EQ(ms.size(), 2u);
  for (double m : ms) {
    std::fprintf(stderr, "a survivor reported the kill -9 after %.0f ms\n", m);
    EXPECT_LT(m, 1000.0);
  }
}

TEST(FaultTolerance, ASilentPeerIsReportedWithinTimeoutPlusOneSecond) {
  const auto timeout = std::chrono::milliseconds(1500);
  const auto ms = detection_ms(PeerFate::stopped, timeout);
  ASSERT_EQ(ms.size(), 2u);
  for (double m : ms) {
    std::fprintf(stderr, "a survivor reported the stopped peer %.0f ms after its call began (timeout %lld ms)\n", m,
                 static_cast<long long>(timeout.count()));
    EXPECT_GE(m, timeout.count() - 50.0);
    EXPECT_LT(m, timeout.count() + 1000.0);
  }
}

// A group's constructor returns on a rank only when every rank's pairs are connected: a rank that
// shrank (closing its connections) right after its constructor returned used to break the handshake
// of a peer still connecting ("connection reset" in its constructor, or Gloo aborting the peer
// process from its event loop); seen in a quarter of the runs on a loaded machine.
TEST(FaultTolerance, ClosingRightAfterConstructionLeavesNoPeerHalfConnected) {
  const std::string store = fresh_store("early-close");
  EXPECT_TRUE(testing::run_ranks(3, [&](int r) {
    for (int round = 0; round < 6; ++round) {
      GroupOptions o = group_options(r, 3, store);
      o.name = fmt::format("round{}", round);
      ProcessGroup pg(o);
      ShrinkOptions so;
      so.window = std::chrono::seconds(10);
      ProcessGroup next = pg.shrink(so);
      RANK_CHECK(next.world_size() == 3, "round {}: shrunk to {}", round, next.world_size());
    }
  }));
}

// Issue 13, defect 12: the timeout set with set_timeout() is the new group's after shrink() and
// reconfigure(), and bounds its calls (the new group used to be built from the first group's options).
TEST(FaultTolerance, SetTimeoutCarriesOverToShrunkAndReconfiguredGroups) {
  const std::string store = fresh_store("settimeout");
  EXPECT_TRUE(testing::run_ranks(2, [&](int r) {
    ProcessGroup pg(group_options(r, 2, store, std::chrono::seconds(20)));
    pg.set_timeout(std::chrono::milliseconds(1234));
    ShrinkOptions so;
    so.window = std::chrono::seconds(10);
    ProcessGroup small = pg.shrink(so);
    RANK_CHECK(small.world_size() == 2, "shrunk to {}", small.world_size());
    RANK_CHECK(small.timeout() == std::chrono::milliseconds(1234), "timeout after shrink: {} ms", small.timeout().count());
    small.set_timeout(std::chrono::milliseconds(777));
    ProcessGroup full = small.reconfigure(so);
    RANK_CHECK(full.timeout() == std::chrono::milliseconds(777), "timeout after reconfigure: {} ms",
               full.timeout().count());
    full.barrier();
    if (r == 1) {  // stays away from the next call
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    const auto t0 = Clock::now();
    try {
      full.barrier();
      RANK_CHECK(false, "barrier without rank 1 succeeded");
    } catch (const DistError& e) {
      const double ms = ms_since(t0);
      RANK_CHECK(std::string(e.what()).find("timed out after 777 ms") != std::string::npos, "{}", e.what());
      RANK_CHECK(ms < 2500, "error after {} ms", ms);
    }
  }));
}

TEST(FaultTolerance, AbortFromAnotherThreadReleasesABlockedCall) {
  const std::string store = fresh_store("abort");
  const std::string traces = testing::fresh_dir("abort-trace");
  EXPECT_TRUE(testing::run_ranks(2, [&](int r) {
    GroupOptions o = group_options(r, 2, store, std::chrono::seconds(30));
    o.trace_dir = traces;
    ProcessGroup pg(o);
    pg.barrier();
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    Tensor t = Tensor::full({1 << 20}, 1, DType::f32);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      pg.abort();
    });
    const auto t0 = Clock::now();
    bool aborted = false;
    try {
      pg.all_reduce(t);
    } catch (const DistError& e) {
      aborted = e.kind() == DistErrorKind::aborted;
      RANK_CHECK(aborted, "kind {}: {}", static_cast<int>(e.kind()), e.what());
    }
    aborter.join();
    const double ms = ms_since(t0);
    std::fprintf(stderr, "[rank 0] abort() released all_reduce after %.0f ms\n", ms);
    RANK_CHECK(aborted && ms < 1500, "released after {} ms", ms);
    RANK_CHECK(std::filesystem::exists(traces + "/pg-g0-rank0.json"), "abort wrote no trace dump");
    // Later calls fail fast.
    try {
      pg.barrier();
      RANK_CHECK(false, "barrier on an aborted group succeeded");
    } catch (const DistError& e) {
      RANK_CHECK(e.kind() == DistErrorKind::aborted, "kind {}", static_cast<int>(e.kind()));
    }
  }));
}

TEST(FaultTolerance, WorkWaitWithTimeoutThrowsAndAborts) {
  const std::string store = fresh_store("wait");
  EXPECT_TRUE(testing::run_ranks(2, [&](int r) {
    ProcessGroup pg(group_options(r, 2, store, std::chrono::seconds(30)));
    pg.barrier();
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      return;
    }
    Work w = pg.barrier_async();
    const auto t0 = Clock::now();
    try {
      w.wait(std::chrono::milliseconds(200));
      RANK_CHECK(false, "wait did not time out");
    } catch (const DistError& e) {
      RANK_CHECK(e.kind() == DistErrorKind::timeout, "kind {}", static_cast<int>(e.kind()));
    }
    RANK_CHECK(ms_since(t0) < 1000, "wait(200 ms) took {} ms", ms_since(t0));
    RANK_CHECK(pg.is_broken(), "group not aborted");
  }));
}

}  // namespace
}  // namespace lmcore::dist
