// Every collective and dtype on 2, 3 and 4 ranks over loopback, checked against a local computation
// of what each rank should hold; the deprecated aliases; mismatch detection on every rank.
#include <gtest/gtest.h>

#include <cmath>

#include "lmcore/dist/process_group.h"
#include "tests/dist/multiprocess.h"

namespace lmcore::dist {
namespace {

using testing::fresh_store;
using testing::run_ranks;

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                       DType::u8,  DType::i16, DType::i32, DType::i64,  DType::boolean,
                                       DType::f8_e4m3fn, DType::f8_e5m2, DType::u16, DType::u32, DType::u64};

// Small integers: exact in every dtype, sums over 4 ranks stay <= 12 (exact even in f8_e4m3fn).
double value(DType dt, int rank, std::int64_t i, bool for_product) {
  if (dt == DType::boolean) return ((rank + i) % 3 != 0) ? 1.0 : 0.0;
  if (for_product) return static_cast<double>((rank + i) % 2 + 1);
  return static_cast<double>((rank * 7 + i * 3) % 3 + 1);
}

Tensor filled(DType dt, std::int64_t n, int rank, bool for_product, std::int64_t base = 0) {
  Tensor t = Tensor::empty({n}, dt);
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = value(dt, rank, base + i, for_product);
      if constexpr (std::is_same_v<T, bool>) p[i] = v != 0; else p[i] = store_from_compute<T>(static_cast<compute_t<T>>(v));
    }
  });
  return t;
}

double element(const Tensor& t, std::int64_t i) {
  return visit_dtype(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    const T v = t.data<T>()[i];
    if constexpr (std::is_same_v<T, bool>) return v ? 1.0 : 0.0; else return static_cast<double>(load_as_compute(v));
  });
}

double expected_reduce(DType dt, ReduceOp op, int n, std::int64_t i, double factor) {
  const bool prod = op == ReduceOp::product;
  double acc = value(dt, 0, i, prod) * (op == ReduceOp::premul_sum ? factor : 1.0);
  for (int r = 1; r < n; ++r) {
    const double v = value(dt, r, i, prod);
    switch (op) {
      case ReduceOp::product: acc = (dt == DType::boolean) ? (acc != 0 && v != 0) : acc * v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
      case ReduceOp::premul_sum: acc += v * factor; break;
      default: acc = (dt == DType::boolean) ? (acc != 0 || v != 0) : acc + v; break;
    }
  }
  if (op == ReduceOp::avg) {
    acc /= n;
    if (is_integral(dt)) acc = std::trunc(acc);
  }
  return acc;
}

void check_close(const Tensor& got, const std::function<double(std::int64_t)>& want, const std::string& what) {
  const double tol = is_low_precision(got.dtype()) ? 0.07 : 0.0;  // f8 rounding of avg (e.g. 5/3)
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double g = element(got, i), w = want(i);
    RANK_CHECK(std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w)), "{}: element {} is {}, expected {}", what, i, g, w);
  }
}

const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::product,
                                    ReduceOp::min, ReduceOp::max, ReduceOp::premul_sum};

void all_collectives(int rank, int n, const std::string& store) {
  ProcessGroup pg(testing::group_options(rank, n, store));
  RANK_CHECK(pg.rank() == rank && pg.world_size() == n, "rank {} world {}", pg.rank(), pg.world_size());
  const double factor = 2.0;
  for (DType dt : kAllDTypes) {
    const std::string dn(dtype_name(dt));
    // Sizes: tiny, odd, and (for a few dtypes) past the direct all_reduce threshold: the ring path.
    std::vector<std::int64_t> sizes = {1, 37};
    if (dt == DType::f32 || dt == DType::bf16 || dt == DType::i64 || dt == DType::u8) sizes.push_back(70001);
    for (std::int64_t count : sizes) {
      for (ReduceOp op : kOps) {
        if (dt == DType::boolean && (op == ReduceOp::avg || op == ReduceOp::premul_sum)) continue;
        Tensor t = filled(dt, count, rank, op == ReduceOp::product);
        pg.all_reduce(t, testing::reduce_options(op, factor));
        check_close(t, [&](std::int64_t i) { return expected_reduce(dt, op, n, i, factor); },
                    fmt::format("all_reduce {} {} x{}", reduce_op_name(op), dn, count));

        const std::int64_t m = count;
        Tensor in = filled(dt, m * n, rank, op == ReduceOp::product);
        Tensor out = Tensor::empty({m}, dt);
        pg.reduce_scatter_single(out, in, testing::reduce_options(op, factor));
        check_close(out, [&](std::int64_t i) { return expected_reduce(dt, op, n, rank * m + i, factor); },
                    fmt::format("reduce_scatter_single {} {} x{}", reduce_op_name(op), dn, m));
      }
      // broadcast from the last rank
      Tensor b = filled(dt, count, rank, false);
      pg.broadcast(b, n - 1);
      check_close(b, [&](std::int64_t i) { return value(dt, n - 1, i, false); }, "broadcast " + dn);

      // all_gather_single: rank r's block at [r*count, (r+1)*count)
      Tensor gin = filled(dt, count, rank, false);
      Tensor gout = Tensor::empty({count * n}, dt);
      pg.all_gather_single(gout, gin);
      check_close(gout, [&](std::int64_t i) { return value(dt, static_cast<int>(i / count), i % count, false); },
                  "all_gather_single " + dn);

      // all_to_all_single: block j of rank r's input carries values of (rank r, index base j*count)
      Tensor ain = filled(dt, count * n, rank, false);
      Tensor aout = Tensor::empty({count * n}, dt);
      pg.all_to_all_single(aout, ain);
      check_close(aout, [&](std::int64_t i) { return value(dt, static_cast<int>(i / count), rank * count + i % count, false); },
                  "all_to_all_single " + dn);

      // send/recv around the ring, both orders at once
      Tensor s = filled(dt, count, rank, false);
      Tensor rbuf = Tensor::empty({count}, dt);
      Work ws = pg.send_async(s, (rank + 1) % n);
      pg.recv(rbuf, (rank + n - 1) % n);
      ws.wait();
      check_close(rbuf, [&](std::int64_t i) { return value(dt, (rank + n - 1) % n, i, false); }, "send/recv " + dn);
    }
  }
  // Async forms, several in flight, waited out of order.
  Tensor x = filled(DType::f32, 5000, rank, false), y = filled(DType::f32, 5000, rank, false);
  Tensor g = Tensor::empty({5000 * n}, DType::f32);
  Work w1 = pg.all_reduce_async(x);
  Work w2 = pg.all_gather_single_async(g, y);
  Work w3 = pg.barrier_async();
  w3.wait(std::chrono::seconds(10));
  w1.wait();
  w2.wait();
  RANK_CHECK(w1.is_completed() && w2.is_completed(), "async works not completed");
  check_close(x, [&](std::int64_t i) { return expected_reduce(DType::f32, ReduceOp::sum, n, i, 1); }, "async all_reduce");
  pg.barrier();
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, EveryCollectiveAndDTypeMatchesLocalComputation) {
  const int n = GetParam();
  const std::string store = fresh_store("coll");
  EXPECT_TRUE(run_ranks(n, [&](int rank) { all_collectives(rank, n, store); }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(2, 3, 4));

// The rings with many small pieces in flight (odd piece sizes, segments of unequal length, both
// receive buffers reused), and the direct algorithms on every size: the defaults reach these
// paths only with megabytes of data.
void pieces_and_direct(int rank, int n, const std::string& store, std::size_t direct_max, std::size_t chunk,
                       std::size_t inline_max = GroupOptions().inline_max_bytes) {
  GroupOptions o = testing::group_options(rank, n, store);
  o.direct_max_bytes = direct_max;
  o.ring_chunk_bytes = chunk;
  o.inline_max_bytes = inline_max;
  ProcessGroup pg(o);
  const std::string how =
      fmt::format("direct_max_bytes {} ring_chunk_bytes {} inline_max_bytes {}", direct_max, chunk, inline_max);
  for (DType dt : {DType::f32, DType::i64}) {
    const std::string dn(dtype_name(dt));
    for (std::int64_t count : {std::int64_t{37}, std::int64_t{5001}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        Tensor t = filled(dt, count, rank, false);
        pg.all_reduce(t, testing::reduce_options(op));
        check_close(t, [&](std::int64_t i) { return expected_reduce(dt, op, n, i, 1.0); },
                    fmt::format("all_reduce {} {} x{} ({})", reduce_op_name(op), dn, count, how));
        Tensor in = filled(dt, count * n, rank, false);
        Tensor out = Tensor::empty({count}, dt);
        pg.reduce_scatter_single(out, in, testing::reduce_options(op));
        check_close(out, [&](std::int64_t i) { return expected_reduce(dt, op, n, rank * count + i, 1.0); },
                    fmt::format("reduce_scatter_single {} {} x{} ({})", reduce_op_name(op), dn, count, how));
      }
      Tensor gin = filled(dt, count, rank, false);
      Tensor gout = Tensor::empty({count * n}, dt);
      pg.all_gather_single(gout, gin);
      check_close(gout, [&](std::int64_t i) { return value(dt, static_cast<int>(i / count), i % count, false); },
                  fmt::format("all_gather_single {} x{} ({})", dn, count, how));
    }
  }
}

TEST_P(Collectives, RingsInSmallPiecesAndDirectAlgorithmsMatchLocalComputation) {
  const int n = GetParam();
  const std::string store = fresh_store("pieces");
  EXPECT_TRUE(run_ranks(n, [&](int rank) {
    pieces_and_direct(rank, n, store + "/ring", 0, 1000);         // rings only, ~1000-byte pieces
    pieces_and_direct(rank, n, store + "/direct", 1 << 30, 1000);  // direct algorithms only
    // direct, and no payload in the header messages (sharded training's groups)
    pieces_and_direct(rank, n, store + "/apart", 1 << 30, 1000, 0);
  }));
}

// all_gather_single whose input lies in its output: at this rank's own block (in place, as FSDP
// does), or at another rank's block, which the gathered blocks overwrite (so the input must leave
// before they land); on the inline, direct and ring paths.
void all_gather_inputs_inside_the_output(int rank, int n, const std::string& store, std::size_t direct_max,
                                         std::int64_t count) {
  GroupOptions o = testing::group_options(rank, n, store);
  o.direct_max_bytes = direct_max;
  o.ring_chunk_bytes = 64 * 1024;
  ProcessGroup pg(o);
  const std::string how = fmt::format("x{}, direct_max_bytes {}", count, direct_max);
  auto expected = [&](std::int64_t i) { return value(DType::f32, static_cast<int>(i / count), i % count, false); };
  Tensor out = Tensor::empty({count * n}, DType::f32);
  Tensor own = out.narrow(0, rank * count, count);
  own.copy_(filled(DType::f32, count, rank, false));
  pg.all_gather_single(out, own);
  check_close(out, expected, "in place, " + how);
  // Rank r's input sits at block (r+1) % n of its output.
  Tensor moved = Tensor::empty({count * n}, DType::f32);
  Tensor elsewhere = moved.narrow(0, ((rank + 1) % n) * count, count);
  elsewhere.copy_(filled(DType::f32, count, rank, false));
  pg.all_gather_single(moved, elsewhere);
  check_close(moved, expected, "input at another rank's block, " + how);
}

TEST_P(Collectives, AllGatherWithItsInputInsideItsOutput) {
  const int n = GetParam();
  const std::string store = fresh_store("ag-inside");
  EXPECT_TRUE(run_ranks(n, [&](int rank) {
    all_gather_inputs_inside_the_output(rank, n, store + "/inline", 4 << 20, 1000);
    all_gather_inputs_inside_the_output(rank, n, store + "/direct", 1 << 30, 300000);
    all_gather_inputs_inside_the_output(rank, n, store + "/ring", 0, 300000);
  }));
}

// all_to_all_single with split sizes: rank k sends rows[k][j] rows (of 3 elements) to rank j, some
// of them none; row i of rank k's input holds k * 1000 + i.
TEST(Collectives, AllToAllWithSplitSizesMatchesLocalComputation) {
  const int n = 3;
  const std::string store = fresh_store("a2a-splits");
  auto rows = [](int k, int j) -> std::int64_t { return (k + 2 * j) % 4; };
  EXPECT_TRUE(run_ranks(n, [&](int rank) {
    ProcessGroup pg(testing::group_options(rank, n, store));
    AllToAllOptions o;
    std::int64_t in_rows = 0, out_rows = 0;
    for (int j = 0; j < n; ++j) {
      o.input_split_sizes.push_back(rows(rank, j));
      o.output_split_sizes.push_back(rows(j, rank));
      in_rows += rows(rank, j);
      out_rows += rows(j, rank);
    }
    Tensor in = Tensor::empty({in_rows, 3}, DType::i32);
    for (std::int64_t i = 0; i < in_rows * 3; ++i) in.data<std::int32_t>()[i] = static_cast<std::int32_t>(rank * 1000 + i / 3);
    Tensor out = Tensor::full({out_rows, 3}, -1, DType::i32);
    pg.all_to_all_single(out, in, o);
    std::vector<std::int32_t> want;
    for (int k = 0; k < n; ++k) {
      std::int64_t first = 0;  // rank k's first row for this rank
      for (int j = 0; j < rank; ++j) first += rows(k, j);
      for (std::int64_t i = 0; i < rows(k, rank); ++i) {
        for (int c = 0; c < 3; ++c) want.push_back(static_cast<std::int32_t>(k * 1000 + first + i));
      }
    }
    RANK_CHECK(out.to_vector<std::int32_t>() == want, "all_to_all_single with splits: got [{}], expected [{}]",
               fmt::join(out.to_vector<std::int32_t>(), ","), fmt::join(want, ","));
  }));
}

TEST(Collectives, DeprecatedAliasesWarnOncePerProcessAndWork) {
  const std::string store = fresh_store("alias");
  const std::string logdir = testing::fresh_dir("alias-log");
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    // Capture this rank's stderr to count the warnings.
    const std::string path = fmt::format("{}/stderr{}", logdir, rank);
    RANK_CHECK(std::freopen(path.c_str(), "w", stderr) != nullptr, "freopen");
    ProcessGroup pg(testing::group_options(rank, 2, store));
    for (int it = 0; it < 3; ++it) {
      Tensor in = Tensor::full({4}, rank + 1, DType::f32), out = Tensor::empty({8}, DType::f32);
      pg.all_gather_into_tensor(out, in);
      RANK_CHECK(out.to_vector<float>() == std::vector<float>({1, 1, 1, 1, 2, 2, 2, 2}), "alias all_gather");
      Tensor rin = Tensor::full({4}, rank + 1, DType::f32), rout = Tensor::empty({2}, DType::f32);
      pg.reduce_scatter_tensor(rout, rin);
      RANK_CHECK(rout.to_vector<float>() == std::vector<float>({3, 3}), "alias reduce_scatter");
    }
    std::fflush(stderr);
    std::FILE* f = std::fopen(path.c_str(), "r");
    std::string text;
    char buf[4096];
    for (std::size_t k; (k = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, k);
    std::fclose(f);
    auto count = [&](const std::string& s) {
      int c = 0;
      for (auto p = text.find(s); p != std::string::npos; p = text.find(s, p + 1)) ++c;
      return c;
    };
    RANK_CHECK(count("all_gather_into_tensor is deprecated, use all_gather_single") == 1, "stderr: {}", text);
    RANK_CHECK(count("reduce_scatter_tensor is deprecated, use reduce_scatter_single") == 1, "stderr: {}", text);
  }));
}

// Each rank runs `call`, which must throw a mismatch DistError on every rank; then the group must
// still work.
void expect_mismatch_everywhere(int n, const std::function<void(ProcessGroup&, int)>& call, const std::string& needle,
                                std::size_t direct_max_bytes = GroupOptions().direct_max_bytes) {
  const std::string store = fresh_store("mismatch");
  EXPECT_TRUE(run_ranks(n, [&](int rank) {
    GroupOptions o = testing::group_options(rank, n, store, std::chrono::seconds(10));
    o.direct_max_bytes = direct_max_bytes;
    ProcessGroup pg(o);
    const auto t0 = std::chrono::steady_clock::now();
    bool thrown = false;
    try {
      call(pg, rank);
    } catch (const DistError& e) {
      thrown = true;
      RANK_CHECK(e.kind() == DistErrorKind::mismatch, "kind {}: {}", static_cast<int>(e.kind()), e.what());
      RANK_CHECK(std::string(e.what()).find(needle) != std::string::npos, "message lacks '{}': {}", needle, e.what());
      RANK_CHECK(std::string(e.what()).find("rank 0:") != std::string::npos, "message lacks per-rank views: {}", e.what());
    }
    RANK_CHECK(thrown, "no error on rank {}", rank);
    RANK_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5), "mismatch took too long");
    RANK_CHECK(!pg.is_broken(), "a mismatch must leave the group usable");
    Tensor t = Tensor::full({3}, 1, DType::i32);
    pg.all_reduce(t);
    RANK_CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>(3, n), "group unusable after mismatch");
  }));
}

TEST(Mismatch, SizesDifferAcrossRanks) {
  expect_mismatch_everywhere(3, [](ProcessGroup& pg, int rank) {
    Tensor t = Tensor::zeros({rank == 1 ? 100 : 64}, DType::f32);
    pg.all_reduce(t);
  }, "in=100");
}

TEST(Mismatch, DTypesDifferAcrossRanks) {
  expect_mismatch_everywhere(2, [](ProcessGroup& pg, int rank) {
    Tensor in = Tensor::zeros({8}, rank == 0 ? DType::f32 : DType::i32);
    Tensor out = Tensor::zeros({16}, in.dtype());
    pg.all_gather_single(out, in);
  }, "i32");
}

// Rank 0's input is small enough to travel with the headers, rank 1's is not: the first-round
// messages differ in length, and every rank must still see a mismatch, not a crash or a hang.
TEST(Mismatch, OnlyOneRankSendsItsPayloadWithTheHeaders) {
  expect_mismatch_everywhere(2, [](ProcessGroup& pg, int rank) {
    // 1.6 MB per peer: over the 1 MiB inline limit, under the 4 MiB direct limit.
    const std::int64_t count = rank == 0 ? 8 : 400000;
    Tensor in = Tensor::zeros({count}, DType::f32), out = Tensor::zeros({2 * count}, DType::f32);
    pg.all_gather_single(out, in);
  }, "in=400000");
  expect_mismatch_everywhere(3, [](ProcessGroup& pg, int rank) {
    Tensor t = Tensor::zeros({rank == 2 ? 1 << 20 : 5}, DType::f32);
    pg.broadcast(t, 2);
  }, "in=1048576");
}

// Above the inline limit all_gather_single moves data before every header is in: to each peer whose
// header agrees. A rank whose input differs must still give every rank the error (and leave no
// half-sent data behind), on the direct path (1.2 MB per rank, over the inline limit, with the direct
// limit raised) and on the ring (4 MB per rank, defaults).
TEST(Mismatch, AllGatherThatOverlapsItsHeaderRound) {
  for (const auto& path : {std::pair<std::int64_t, std::size_t>{300000, std::size_t{1} << 30},
                            {1000000, GroupOptions().direct_max_bytes}}) {
    const std::int64_t count = path.first;
    const std::size_t direct_max = path.second;
    for (int n : {3, 4}) {
      // With 4 ranks, rank 3 meets rank 1 only in the chain of its second ring step.
      expect_mismatch_everywhere(n, [count, n](ProcessGroup& pg, int rank) {
        const std::int64_t mine = rank == 1 ? count + 4 : count;
        Tensor in = Tensor::zeros({mine}, DType::f32), out = Tensor::zeros({n * mine}, DType::f32);
        pg.all_gather_single(out, in);
      }, fmt::format("in={}", count + 4), direct_max);
    }
  }
}

// One rank keeps payloads out of the header messages (inline_max_bytes 0), the others do not: their
// first-round messages differ in length, and every rank must see a mismatch, not a crash or a hang.
TEST(Mismatch, RanksThatDisagreeOnInlinePayloads) {
  const int n = 3;
  const std::string store = fresh_store("mismatch-inline");
  EXPECT_TRUE(run_ranks(n, [&](int rank) {
    GroupOptions o = testing::group_options(rank, n, store, std::chrono::seconds(10));
    if (rank == 1) o.inline_max_bytes = 0;
    ProcessGroup pg(o);
    bool thrown = false;
    try {
      Tensor in = Tensor::zeros({1000}, DType::f32), out = Tensor::zeros({n * 1000}, DType::f32);
      pg.all_gather_single(out, in);
    } catch (const DistError& e) {
      thrown = true;
      RANK_CHECK(e.kind() == DistErrorKind::mismatch, "kind {}: {}", static_cast<int>(e.kind()), e.what());
      RANK_CHECK(std::string(e.what()).find("with 4000 payload bytes") != std::string::npos,
                 "message lacks the payload sizes: {}", e.what());
    }
    RANK_CHECK(thrown, "no error on rank {}", rank);
    RANK_CHECK(!pg.is_broken(), "a mismatch must leave the group usable");
  }));
}

TEST(Mismatch, DifferentCollectives) {
  expect_mismatch_everywhere(2, [](ProcessGroup& pg, int rank) {
    Tensor t = Tensor::zeros({8}, DType::f32);
    if (rank == 0) pg.all_reduce(t); else pg.broadcast(t, 0);
  }, "broadcast");
}

TEST(Mismatch, WrongOutputSizeOnOneRankIsReportedEverywhere) {
  expect_mismatch_everywhere(3, [](ProcessGroup& pg, int rank) {
    Tensor in = Tensor::zeros({12}, DType::f32);
    Tensor out = Tensor::zeros({rank == 2 ? 5 : 4}, DType::f32);
    pg.reduce_scatter_single(out, in);
  }, "invalid here");
}

// Issue 13, defect 6: a read-only output (from_numpy of a writeable=False array) on one rank is an
// error on every rank, found before any byte moves; a broadcast's root only reads its tensor.
Tensor read_only_zeros(std::int64_t n) {
  auto bytes = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n), 0.0f);
  return Tensor::from_storage(Storage::borrow(bytes->data(), bytes->size() * sizeof(float), bytes, /*read_only=*/true),
                              DType::f32, {n}, {1}, 0);
}

TEST(Mismatch, ReadOnlyOutputOnOneRankIsReportedEverywhere) {
  expect_mismatch_everywhere(3, [](ProcessGroup& pg, int rank) {
    Tensor t = rank == 1 ? read_only_zeros(8) : Tensor::zeros({8}, DType::f32);
    pg.all_reduce(t);
  }, "read-only");
  expect_mismatch_everywhere(2, [](ProcessGroup& pg, int rank) {
    Tensor t = rank == 1 ? read_only_zeros(8) : Tensor::zeros({8}, DType::f32);
    if (rank == 0) pg.send(t, 1); else pg.recv(t, 0);
  }, "read-only");
  const std::string store = fresh_store("read-only-root");
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    ProcessGroup pg(testing::group_options(rank, 2, store, std::chrono::seconds(10)));
    Tensor t = rank == 0 ? read_only_zeros(4) : Tensor::full({4}, 1.0, DType::f32);
    pg.broadcast(t, 0);
    RANK_CHECK(t.to_vector<float>() == std::vector<float>(4, 0.0f), "broadcast from a read-only root");
  }));
}

TEST(Mismatch, AlgorithmOptionsDifferAcrossRanks) {
  const std::string store = fresh_store("mismatch-options");
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    GroupOptions o = testing::group_options(rank, 2, store, std::chrono::seconds(10));
    if (rank == 1) o.ring_chunk_bytes = 4096;
    ProcessGroup pg(o);
    Tensor t = Tensor::zeros({1 << 18}, DType::f32);
    try {
      pg.all_reduce(t);
      RANK_CHECK(false, "all_reduce with different ring_chunk_bytes succeeded");
    } catch (const DistError& e) {
      RANK_CHECK(e.kind() == DistErrorKind::mismatch && std::string(e.what()).find("ring_chunk_bytes 4096") != std::string::npos,
                 "{}", e.what());
    }
  }));
}

TEST(Mismatch, AllToAllSplitSizesDisagree) {
  expect_mismatch_everywhere(3, [](ProcessGroup& pg, int rank) {
    // Every rank sends 2 rows to each rank, but rank 1 expects 3 rows from rank 0 and 1 from rank 2.
    AllToAllOptions o;
    o.input_split_sizes = {2, 2, 2};
    o.output_split_sizes = rank == 1 ? std::vector<std::int64_t>{3, 2, 1} : std::vector<std::int64_t>{2, 2, 2};
    Tensor in = Tensor::zeros({6}, DType::f32), out = Tensor::zeros({6}, DType::f32);
    pg.all_to_all_single(out, in, o);
  }, "rank 0 sends 2 elements to rank 1, which expects 3");
}

TEST(Mismatch, SendRecvSizes) {
  expect_mismatch_everywhere(2, [](ProcessGroup& pg, int rank) {
    Tensor t = Tensor::zeros({rank == 0 ? 10 : 11}, DType::f32);
    if (rank == 0) pg.send(t, 1); else pg.recv(t, 0);
  }, "send");
}

}  // namespace
}  // namespace lmcore::dist
