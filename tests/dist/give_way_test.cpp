// ProcessGroup::give_way_to: a group's reduce-scatters in pieces (every size, rank count and the
// all_reduce that starts with one) still match a local computation; they wait while a caller waits
// on the other group, and only then; abort() and the deadline release that wait; ranks that disagree
// on giving way get a mismatch; the argument checks.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "lmcore/dist/process_group.h"
#include "tests/dist/multiprocess.h"

namespace lmcore::dist {
namespace {

using Clock = std::chrono::steady_clock;
using testing::fresh_store;
using testing::run_ranks;

// The groups of sharded training: direct algorithms, payloads apart from the headers.
GroupOptions sharding_like(int rank, int n, const std::string& store, const std::string& name,
                           std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  GroupOptions o = testing::group_options(rank, n, store, timeout);
  o.name = name;
  o.direct_max_bytes = std::size_t{1} << 30;
  o.inline_max_bytes = 0;
  return o;
}

// A thread that waits on a Work (as compute waits on a gather), joined however the scope ends.
struct Waiter {
  std::thread t;
  void start(const Work& w) {
    t = std::thread([w] {
      try {
        w.wait();
      } catch (const DistError&) {
        // the test reports what went wrong; the thread only waits
      }
    });
  }
  ~Waiter() {
    if (t.joinable()) t.join();
  }
};

// Rank r's element i: small integers, exact in f32 sums.
float v(int rank, std::int64_t i) { return static_cast<float>((rank * 7 + i * 3) % 5 + 1); }

class GiveWay : public ::testing::TestWithParam<int> {};

TEST_P(GiveWay, ReduceScatterInPiecesMatchesLocalComputation) {
  const int n = GetParam();
  const std::string store = fresh_store("giveway");
  EXPECT_TRUE(run_ranks(n, [&](int rank) {
    ProcessGroup main(sharding_like(rank, n, store, "main"));
    ProcessGroup rs(sharding_like(rank, n, store, "rs"));
    rs.give_way_to(main, 4096);  // pieces of 4096 / (n - 1) bytes per peer: many of them
    // 1 element (fewer bytes than a piece), a piece's worth less one, ragged, and many pieces.
    for (std::int64_t count : {std::int64_t{1}, std::int64_t{4096 / 4 / (n - 1) - 1}, std::int64_t{5001},
                               std::int64_t{65537}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        Tensor in = Tensor::empty({count * n}, DType::f32);
        for (std::int64_t i = 0; i < count * n; ++i) in.data<float>()[i] = v(rank, i);
        Tensor out = Tensor::full({count}, -1.0, DType::f32);
        // Half of the calls beside an all-gather of the other group that a thread waits on.
        Work g;
        Tensor gin = Tensor::full({count}, rank, DType::f32), gout = Tensor::empty({count * n}, DType::f32);
        Waiter waiter;
        if (op == ReduceOp::avg) {
          g = main.all_gather_single_async(gout, gin);
          waiter.start(g);
        }
        rs.reduce_scatter_single(out, in, testing::reduce_options(op));
        if (op == ReduceOp::avg) g.wait();
        for (std::int64_t i = 0; i < count; ++i) {
          double want = 0;
          for (int p = 0; p < n; ++p) want += v(p, rank * count + i);
          if (op == ReduceOp::avg) want /= n;
          RANK_CHECK(std::abs(out.data<float>()[i] - want) <= 1e-6 * want, "{} x{} element {}: {} vs {}",
                     reduce_op_name(op), count, i, out.data<float>()[i], want);
        }
      }
    }
    // all_reduce above 64 KiB: a reduce-scatter (in pieces), then an all-gather.
    const std::int64_t count = 50001;
    Tensor t = Tensor::empty({count}, DType::f32);
    for (std::int64_t i = 0; i < count; ++i) t.data<float>()[i] = v(rank, i);
    rs.all_reduce(t);
    for (std::int64_t i = 0; i < count; ++i) {
      double want = 0;
      for (int p = 0; p < n; ++p) want += v(p, i);
      RANK_CHECK(t.data<float>()[i] == want, "all_reduce element {}: {} vs {}", i, t.data<float>()[i], want);
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GiveWay, ::testing::Values(2, 3, 4));

// Rank 1 issues the other group's all-gather a second late, so on rank 0 it stays in flight all that
// time. With give_way_to and a thread of rank 0 blocked on it, rank 0's reduce-scatter must not end
// before the all-gather; without give_way_to, or with nobody waiting on the all-gather (a prefetch),
// it ends first (which also shows that the test can fail).
void reduce_scatter_beside_a_late_all_gather(bool give_way, bool someone_waits) {
  const std::string store = fresh_store("giveway-late");
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    ProcessGroup main(sharding_like(rank, 2, store, "main"));
    ProcessGroup rs(sharding_like(rank, 2, store, "rs"));
    if (give_way) rs.give_way_to(main);
    const std::int64_t count = 300000;  // 1.2 MB per rank: three pieces
    Tensor in = Tensor::full({2 * count}, 1.0, DType::f32), out = Tensor::empty({count}, DType::f32);
    Tensor gin = Tensor::full({1000}, rank, DType::f32), gout = Tensor::empty({2000}, DType::f32);
    if (rank == 0) {
      Work g = main.all_gather_single_async(gout, gin);
      Waiter waiter;
      if (someone_waits) {
        waiter.start(g);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // until it blocks
      }
      rs.reduce_scatter_single(out, in);
      const bool gathered = g.is_completed();
      g.wait();
      const bool want = give_way && someone_waits;
      RANK_CHECK(gathered == want, "the reduce-scatter finished {} the all-gather ({} give_way_to, {})",
                 gathered ? "after" : "before", give_way ? "with" : "without",
                 someone_waits ? "a thread waiting on it" : "nobody waiting on it");
    } else {
      Work r = rs.reduce_scatter_single_async(out, in);
      std::this_thread::sleep_for(std::chrono::seconds(1));
      main.all_gather_single(gout, gin);
      r.wait();
    }
    RANK_CHECK(out.data<float>()[count - 1] == 2.0f, "reduce-scatter result {}", out.data<float>()[count - 1]);
  }));
}

TEST(GiveWayTiming, WaitsWhileACallerWaitsOnTheOtherGroup) { reduce_scatter_beside_a_late_all_gather(true, true); }
TEST(GiveWayTiming, DoesNotWaitForACallNobodyWaitsOn) { reduce_scatter_beside_a_late_all_gather(true, false); }
TEST(GiveWayTiming, WithoutItTheReduceScatterDoesNotWait) { reduce_scatter_beside_a_late_all_gather(false, true); }

// The other group's all-gather never completes (rank 1 never calls it) and a thread of rank 0 waits
// on it: abort() of the giving-way group releases its waiting reduce-scatter at once, and its
// deadline bounds the wait.
TEST(GiveWayTiming, AbortAndTheDeadlineReleaseTheWait) {
  const std::string store = fresh_store("giveway-abort");
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    ProcessGroup main(sharding_like(rank, 2, store, "main"));
    ProcessGroup rs(sharding_like(rank, 2, store, "rs"));
    ProcessGroup rs2(sharding_like(rank, 2, store, "rs2", std::chrono::milliseconds(800)));
    rs.give_way_to(main);
    rs2.give_way_to(main);
    Tensor in = Tensor::full({200000}, 1.0, DType::f32), out = Tensor::empty({100000}, DType::f32);
    Tensor in2 = Tensor::full({200000}, 1.0, DType::f32), out2 = Tensor::empty({100000}, DType::f32);
    Tensor gin = Tensor::full({10}, 1.0, DType::f32), gout = Tensor::empty({20}, DType::f32);
    Work g;
    Waiter waiter;
    if (rank == 0) {
      g = main.all_gather_single_async(gout, gin);
      waiter.start(g);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    Work w = rs.reduce_scatter_single_async(out, in);
    // 1. The deadline (800 ms) ends rs2's wait on rank 0, and its peer's wait for rank 0's data (the
    //    peer's own deadline, at about the same time: whichever rank gives up first closes the
    //    connections, so the other may see a peer failure instead).
    const auto t0 = Clock::now();
    bool failed = false;
    try {
      rs2.reduce_scatter_single(out2, in2);
    } catch (const DistError& e) {
      failed = e.kind() == DistErrorKind::timeout || e.kind() == DistErrorKind::peer_failure;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rank == 0 && (!failed || waited >= 5.0)) main.abort();  // releases the waiter before failing
    RANK_CHECK(failed, "rank {}: rs2 did not fail with a timeout (or its peer's)", rank);
    RANK_CHECK(waited >= 0.7 && waited < 5.0, "rank {}: rs2 failed after {:.2f} s (timeout 0.8 s)", rank, waited);
    // 2. abort() releases rs's wait on rank 0 promptly.
    if (rank == 0) {
      const auto t1 = Clock::now();
      rs.abort();
      bool aborted = false;
      try {
        w.wait();
      } catch (const DistError& e) {
        aborted = e.kind() == DistErrorKind::aborted;
      }
      const double took = std::chrono::duration<double>(Clock::now() - t1).count();
      main.abort();
      RANK_CHECK(aborted, "the waiting reduce-scatter was not aborted");
      RANK_CHECK(took < 1.0, "abort released the wait after {:.2f} s", took);
    } else {
      try {
        w.wait();
      } catch (const DistError&) {
      }
    }
  }));
}

// One rank gives way, the other does not: they would cut the data differently. Both get a mismatch
// naming the piece size, and the group stays usable.
TEST(GiveWayMismatch, RanksThatDisagreeOnGivingWay) {
  const std::string store = fresh_store("giveway-mismatch");
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    ProcessGroup main(sharding_like(rank, 2, store, "main", std::chrono::seconds(10)));
    ProcessGroup rs(sharding_like(rank, 2, store, "rs", std::chrono::seconds(10)));
    if (rank == 1) rs.give_way_to(main, 65536);
    Tensor in = Tensor::full({200000}, 1.0, DType::f32), out = Tensor::empty({100000}, DType::f32);
    bool thrown = false;
    try {
      rs.reduce_scatter_single(out, in);
    } catch (const DistError& e) {
      thrown = true;
      RANK_CHECK(e.kind() == DistErrorKind::mismatch, "kind {}: {}", static_cast<int>(e.kind()), e.what());
      RANK_CHECK(std::string(e.what()).find("giving way in pieces of 65536 bytes") != std::string::npos,
                 "message lacks the piece size: {}", e.what());
    }
    RANK_CHECK(thrown, "no error on rank {}", rank);
    RANK_CHECK(!rs.is_broken(), "a mismatch must leave the group usable");
  }));
}

TEST(GiveWayArguments, ItselfACycleAndTinyPiecesAreRefused) {
  const std::string store = fresh_store("giveway-args");
  EXPECT_TRUE(run_ranks(1, [&](int rank) {
    ProcessGroup a(sharding_like(rank, 1, store, "a"));
    ProcessGroup b(sharding_like(rank, 1, store, "b"));
    auto refused = [](const std::function<void()>& f, const std::string& needle) {
      try {
        f();
      } catch (const Error& e) {
        RANK_CHECK(std::string(e.what()).find(needle) != std::string::npos, "message lacks '{}': {}", needle, e.what());
        return;
      }
      RANK_CHECK(false, "not refused: {}", needle);
    };
    refused([&] { a.give_way_to(a); }, "cannot give way to itself");
    refused([&] { a.give_way_to(b, 100); }, "piece_bytes 100 must be at least 4096");
    b.give_way_to(a);
    refused([&] { a.give_way_to(b); }, "'b' already gives way to 'a'");
    Tensor t = Tensor::full({8}, 3.0, DType::f32), o = Tensor::empty({8}, DType::f32);
    b.reduce_scatter_single(o, t);  // one rank: nothing to wait for
    RANK_CHECK(o.data<float>()[7] == 3.0f, "one-rank reduce-scatter {}", o.data<float>()[7]);
  }));
}

}  // namespace
}  // namespace lmcore::dist
