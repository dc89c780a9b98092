// lmcore bench comm — bus bandwidth of lmcore's collectives beside raw Gloo, with 2 and 4 ranks on
// loopback (spawned processes: this program re-executed with LMCORE_BENCH_COMM_WORKER set).
//
// Definitions as in nccl-tests, with S the size of the full buffer (all_reduce: the buffer;
// all_gather: the output; reduce_scatter: the input) and t the time of one call:
//   algbw = S / t;   busbw = algbw * 2(n-1)/n (all_reduce), algbw * (n-1)/n (all_gather, reduce_scatter)
// Rows: lmcore all_gather_single, reduce_scatter_single and all_reduce; raw gloo::allgather and
// gloo::allreduce (ring) on the same connections; and the reduce-scatter PyTorch's Gloo backend does
// (gloo::allreduce of the whole input, then a copy of this rank's slice), rated as a reduce-scatter.
//
// Each lmcore collective is timed beside the baseline it is rated against, in adjacent batches whose
// order alternates from round to round, and its ratio is the median over rounds of the two batches'
// ratio. On this shared 2-core machine the speed of both moves by up to a third within a minute;
// a pair of adjacent batches sees the same conditions, two medians taken apart do not.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "bench/suites/bench_suite.h"
#include "lmcore/dist/process_group.h"

namespace lmcore::bench {

namespace {

using Clock = std::chrono::steady_clock;

const char* kVariants[] = {"all_gather_single", "gloo allgather",          "reduce_scatter_single",
                           "allreduce+slice",   "all_reduce",              "gloo allreduce"};

// About how long one batch of calls of one variant lasts.
constexpr double kBatchSeconds = 0.25;

// Each lmcore collective and the baseline it is rated against.
struct Pairing {
  const char* lmcore;
  const char* baseline;
};
const Pairing kPairings[] = {{"all_gather_single", "gloo allgather"},
                             {"reduce_scatter_single", "allreduce+slice"},
                             {"all_reduce", "gloo allreduce"}};

double bus_factor(const std::string& v, int n) {
  const double f = static_cast<double>(n - 1) / n;
  return (v == "all_reduce" || v == "gloo allreduce") ? 2 * f : f;
}

std::vector<std::int64_t> sizes_for(bool quick) {
  if (quick) return {64 << 10, 4 << 20};
  std::vector<std::int64_t> s;
  for (std::int64_t b = 4 << 10; b <= (256ll << 20); b *= 4) s.push_back(b);
  return s;
}

// "4K", "64M", "1024": bytes.
std::int64_t parse_bytes(const std::string& text) {
  std::size_t used = 0;
  std::int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const std::int64_t scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : 0;
  if (used == 0 || scale == 0 || v <= 0 || v > (std::int64_t{1} << 40) / scale)
    throw BenchUsageError(fmt::format("bench comm: size '{}' is not a number of bytes in [1, 1T] (4K, 64M)", text));
  return v * scale;
}

// Runs in each spawned rank; rank 0 writes "variant size seconds" lines to `result`.
void worker(int rank, int world, const std::string& store, const std::string& result, bool quick,
            const std::vector<std::int64_t>& sizes) {
  dist::GroupOptions o;
  o.rank = rank;
  o.world_size = world;
  o.store_url = store;
  o.timeout = std::chrono::seconds(120);
  dist::ProcessGroup pg(o);
  std::shared_ptr<gloo::Context> ctx(static_cast<gloo::Context*>(pg.gloo_context()), [](gloo::Context*) {});
  std::ostringstream out;
  std::uint32_t tag = 1;
  for (std::int64_t bytes : sizes) {
    const std::int64_t total = bytes / 4;      // f32 elements of the full buffer
    const std::int64_t shard = total / world;  // per-rank block
    Tensor full = Tensor::full({total}, 1.0, DType::f32);
    Tensor part = Tensor::full({shard}, 1.0, DType::f32);
    Tensor gathered = Tensor::empty({shard * world}, DType::f32);
    std::vector<float> scratch(static_cast<std::size_t>(total));
    const int rounds = quick ? 1 : bytes >= (256ll << 20) ? 4 : 8;
    std::map<std::string, std::vector<double>> batch_times, pair_ratios;
    auto once = [&](const std::string& name) {
      if (name == "all_gather_single") {
        pg.all_gather_single(gathered, part);
      } else if (name == "gloo allgather") {
        gloo::AllgatherOptions go(ctx);
        go.setInput(part.data<float>(), static_cast<std::size_t>(shard));
        go.setOutput(gathered.data<float>(), static_cast<std::size_t>(shard * world));
        go.setTag(tag++);
        gloo::allgather(go);
      } else if (name == "reduce_scatter_single") {
        pg.reduce_scatter_single(part, full);
      } else if (name == "allreduce+slice") {
        std::memcpy(scratch.data(), full.data<float>(), static_cast<std::size_t>(bytes));
        gloo::AllreduceOptions ao(ctx);
        ao.setOutput(scratch.data(), scratch.size());
        ao.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        ao.setTag(tag++);
        gloo::allreduce(ao);
        std::memcpy(part.data<float>(), scratch.data() + rank * shard, static_cast<std::size_t>(shard) * 4);
      } else if (name == "all_reduce") {
        pg.all_reduce(full);
      } else {
        gloo::AllreduceOptions ao(ctx);
        ao.setOutput(full.data<float>(), static_cast<std::size_t>(total));
        ao.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        ao.setTag(tag++);
        gloo::allreduce(ao);
      }
    };
    for (const char* v : kVariants) once(v);  // warm-up: connections, scratch buffers, page faults
    // A batch lasts about kBatchSeconds whatever the size, so that it spans many scheduler periods
    // even where one call takes tens of milliseconds; calls per batch come from the slowest rank's
    // best of two timed calls, so every rank runs the same number.
    constexpr int kVariantCount = static_cast<int>(std::size(kVariants));
    std::map<std::string, int> iters;
    Tensor one_call = Tensor::empty({kVariantCount}, DType::f64);
    for (int v = 0; v < kVariantCount; ++v) {
      double best = 0;
      for (int i = 0; i < 2; ++i) {
        pg.barrier();
        const auto t0 = Clock::now();
        once(kVariants[v]);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best = i == 0 ? s : std::min(best, s);
      }
      one_call.data<double>()[v] = best;
    }
    pg.all_reduce(one_call, dist::ReduceOptions{dist::ReduceOp::max, 1.0, std::chrono::milliseconds(0)});
    for (int v = 0; v < kVariantCount; ++v) {
      const double calls = kBatchSeconds / std::max(one_call.data<double>()[v], 1e-7);
      iters[kVariants[v]] = quick ? 3 : static_cast<int>(std::clamp(calls, 2.0, 1000.0));
    }
    // The slowest rank's mean time per call over a batch.
    auto batch = [&](const std::string& name) {
      pg.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < iters[name]; ++i) once(name);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters[name];
      Tensor ts = Tensor::full({1}, s, DType::f64);
      pg.all_reduce(ts, dist::ReduceOptions{dist::ReduceOp::max, 1.0, std::chrono::milliseconds(0)});
      // Keep the values bounded (sums of ones grow every call).
      full.fill_(1.0);
      part.fill_(1.0);
      return ts.data<double>()[0];
    };
    // Rounds rotate the order of the pairings and alternate which of a pair goes first.
    constexpr int kPairingCount = static_cast<int>(std::size(kPairings));
    for (int round = 0; round < rounds; ++round) {
      for (int k = 0; k < kPairingCount; ++k) {
        const Pairing& p = kPairings[(k + round) % kPairingCount];
        double t_lmcore = 0, t_baseline = 0;
        if (round % 2 == 0) {
          t_lmcore = batch(p.lmcore);
          t_baseline = batch(p.baseline);
        } else {
          t_baseline = batch(p.baseline);
          t_lmcore = batch(p.lmcore);
        }
        batch_times[p.lmcore].push_back(t_lmcore);
        batch_times[p.baseline].push_back(t_baseline);
        // Ratio of bus bandwidths.
        pair_ratios[p.lmcore].push_back(bus_factor(p.lmcore, world) / t_lmcore /
                                        (bus_factor(p.baseline, world) / t_baseline));
      }
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const std::size_t m = v.size() / 2;
      return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
    };
    for (const char* v : kVariants) out << "time\t" << v << "\t" << bytes << "\t" << median(batch_times[v]) << "\n";
    for (const Pairing& p : kPairings) {
      out << "ratio\t" << p.lmcore << "\t" << bytes << "\t" << median(pair_ratios[p.lmcore]) << "\n";
    }
  }
  if (rank == 0) {
    std::ofstream f(result);
    f << out.str();
  }
}

// What rank 0 of one world measured, by (variant, bytes): median times, and the median paired
// ratios of each lmcore variant to its baseline.
struct WorldResults {
  std::map<std::pair<std::string, std::int64_t>, double> seconds, ratio;
};

// Spawns `world` ranks of this program in worker mode and reads rank 0's results.
WorldResults run_world(int world, bool quick, const std::vector<std::int64_t>& sizes) {
  char tmpl[] = "/tmp/lmcore-bench-comm-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) fail("bench comm: mkdtemp failed: {}", std::strerror(errno));
  const std::string dir = tmpl;
  const std::string store = "file://" + dir + "/store", result = dir + "/result.tsv";
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string spec =
          fmt::format("{} {} {} {} {} {}", r, world, store, result, quick ? 1 : 0, fmt::join(sizes, ","));
      setenv("LMCORE_BENCH_COMM_WORKER", spec.c_str(), 1);
      execl("/proc/self/exe", "lmcore", "bench", "comm", static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  WorldResults results;
  std::ifstream in(result);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind, name, b, s;
    std::getline(ls, kind, '\t');
    std::getline(ls, name, '\t');
    std::getline(ls, b, '\t');
    std::getline(ls, s, '\t');
    (kind == "ratio" ? results.ratio : results.seconds)[{name, std::stoll(b)}] = std::stod(s);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  LMCORE_CHECK(ok && !results.seconds.empty(), "bench comm: a rank of the {}-rank run failed", world);
  return results;
}

std::string size_text(std::int64_t b) {
  if (b >= (1 << 20)) return fmt::format("{} MiB", b >> 20);
  return fmt::format("{} KiB", b >> 10);
}

}  // namespace

std::vector<BenchTable> run_comm_suite(const BenchOptions& options) {
  if (const char* spec = std::getenv("LMCORE_BENCH_COMM_WORKER")) {
    std::istringstream ss(spec);
    int rank = 0, world = 0, quick = 0;
    std::string store, result;
    std::string size_list;
    ss >> rank >> world >> store >> result >> quick >> size_list;
    try {
      std::vector<std::int64_t> sizes;
      for (const std::string& b : split_commas(size_list)) sizes.push_back(std::stoll(b));
      worker(rank, world, store, result, quick != 0, sizes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench comm worker %d: %s\n", rank, e.what());
      std::fflush(stderr);
      _exit(1);
    }
    std::fflush(stdout);
    _exit(0);
  }
  std::vector<BenchTable> tables;
  std::vector<int> worlds = options.quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  std::vector<std::int64_t> sizes = sizes_for(options.quick);
  // --ranks=2,4 and --sizes=4K,64M pick a subset (or other sizes).
  for (const std::string& a : options.args) {
    if (a.rfind("--ranks=", 0) == 0) {
      worlds.clear();
      for (std::int64_t n : int_list_arg("comm", a, "--ranks=", 2, 64)) worlds.push_back(static_cast<int>(n));
    } else if (a.rfind("--sizes=", 0) == 0) {
      sizes.clear();
      for (const std::string& b : split_commas(a.substr(8))) sizes.push_back(parse_bytes(b));
      if (sizes.empty()) throw BenchUsageError(fmt::format("bench comm: {}: expected sizes separated by commas", a));
    } else {
      fail("bench comm: unknown argument '{}', expected --ranks=N[,N...] or --sizes=BYTES[,BYTES...]", a);
    }
  }
  LMCORE_CHECK(!worlds.empty() && !sizes.empty(), "bench comm: no world sizes or no buffer sizes to run");
  BenchTable ratios{"comm: ratios of bus bandwidth",
                    {"ranks", "size", "all_gather_single / gloo allgather", "reduce_scatter_single / allreduce+slice",
                     "all_reduce / gloo allreduce"},
                    {},
                    {"each ratio: the median over rounds of the ratio of two adjacent batches, the lmcore "
                     "collective's and its baseline's, in alternating order",
                     "targets: all_gather_single >= 0.90 x gloo allgather; reduce_scatter_single >= 1.6 x "
                     "allreduce+slice at 64 MiB"}};
  for (int n : worlds) {
    const WorldResults res = run_world(n, options.quick, sizes);
    BenchTable t{fmt::format("comm: {} ranks on loopback, f32, bus bandwidth (nccl-tests definitions)", n),
                 {"size", "variant", "time ms", "algbw GB/s", "busbw GB/s"},
                 {},
                 {}};
    for (std::int64_t b : sizes) {
      for (const char* v : kVariants) {
        auto it = res.seconds.find({v, b});
        if (it == res.seconds.end()) continue;
        const double s = it->second, alg = static_cast<double>(b) / s / 1e9;
        t.rows.push_back({size_text(b), v, s * 1e3, alg, alg * bus_factor(v, n)});
      }
      auto ratio = [&](const char* v) {
        auto it = res.ratio.find({v, b});
        return it == res.ratio.end() ? std::nan("") : it->second;
      };
      ratios.rows.push_back(
          {n, size_text(b), ratio("all_gather_single"), ratio("reduce_scatter_single"), ratio("all_reduce")});
    }
    t.notes.push_back(
        fmt::format("each time: the median over rounds (8; 4 at 256 MiB) of the slowest rank's mean over a batch of "
                    "calls lasting about {} s (at least 2 calls)",
                    kBatchSeconds));
    tables.push_back(std::move(t));
  }
  tables.push_back(std::move(ratios));
  return tables;
}

}  // namespace lmcore::bench
