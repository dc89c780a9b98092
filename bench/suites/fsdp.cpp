// lmcore bench fsdp — sharded training steps: step time, tokens/s and exposed communication (the time
// a rank waits on collectives) for 2 and 4 ranks, with and without prefetch and the separate
// reduce-scatter group (prefetch depth 1, and 2 with the group), over loopback and over network
// namespaces joined by shaped links (bench/fsdp_netns.sh: needs root). Hidden = 1 - exposed / the
// step's collectives run back to back (measured by each run before training, on the same links).
// Cores busy = the machine's CPU use while the measured steps ran: where it nears 100%, the cores and
// not the link bound the overlapped step.
//
// Each configuration is one `lmcore train --fsdp` run (its ranks started by `lmcore launch`, or by the
// namespace script) on the built-in corpus; the figures are rank 0's medians over the steps after the
// first two. --quick: loopback, 2 ranks, neither and both. --ranks=2,4 --net=loopback,shaped
// --rate=1gbit --steps=N --batch=N|auto pick a subset.
//
// The issue's set-up has communication cost about as much as compute. How much a batch computes
// depends on the machine, so by default (--batch=auto) each rank count on the shaped link first runs
// the plain configuration at 8 x 128 tokens per rank and, where its compute and its collectives differ
// by more than 15%, scales the batch by their ratio (compute grows with the batch, the collectives move
// the parameters only) and runs every configuration at that batch. Loopback stays at 8 x 128.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/suites/bench_suite.h"
#include "lmcore/core/error.h"
#include "lmcore/model/config.h"
#include "lmcore/train/builtin_corpus.h"

namespace lmcore::bench {

namespace {

struct RunFigures {
  double step_s = -1, tokens_per_s = -1, wait_s = -1, comm_s = -1;
  std::string error;
};

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

RunFigures read_run(const std::string& out_dir, std::int64_t skip) {
  RunFigures f;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::vector<double> step, tps, wait;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j["event"] == "start") f.comm_s = j.value("comm_step_s", -1.0);
    if (j["event"] == "step" && j.value("step", 0) > skip) {
      step.push_back(j.value("step_s", 0.0));
      tps.push_back(j.value("tokens_per_s", 0.0));
      wait.push_back(j.value("comm_wait_s", 0.0));
    }
  }
  if (step.empty()) {
    f.error = "no steps logged in " + out_dir;
    return f;
  }
  f.step_s = median(step);
  // tokens/s of the median step (the median of per-step rates would be another step's when the count is even).
  f.tokens_per_s = tps.front() * step.front() / f.step_s;
  f.wait_s = median(wait);
  return f;
}

// The machine's CPU time from /proc/stat's first line, in ticks: busy (all but idle and iowait) and total.
struct CpuTicks {
  std::uint64_t busy = 0, total = 0;
};

CpuTicks read_cpu_ticks() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  std::uint64_t v[8] = {};
  in >> cpu;
  for (auto& x : v) in >> x;
  CpuTicks t;
  if (!in || cpu != "cpu") return t;
  for (auto x : v) t.total += x;
  t.busy = t.total - v[3] - v[4];  // user nice system [idle iowait] irq softirq steal
  return t;
}

// Steps rank 0 has logged so far.
std::int64_t logged_steps(const std::string& out_dir) {
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line;
  std::int64_t n = 0;
  while (std::getline(in, line)) n += line.find("\"event\":\"step\"") != std::string::npos;
  return n;
}

// How busy the machine's cores were while a run trained its steps after the first `skip`: a thread
// watches the run's log and reads /proc/stat when step `skip` and each later step appear, so start-up
// and the collectives timed before training stay out. A step at ~100% is bound by the cores, not by
// the link: overlap then cannot shorten it further. -1 when fewer than two of those steps were seen.
class BusySampler {
 public:
  BusySampler(std::string out_dir, std::int64_t skip)
      : thread_([this, dir = std::move(out_dir), skip] {
          std::int64_t seen = 0;
          while (!stop_.load()) {
            const std::int64_t n = logged_steps(dir);
            if (n > seen && n >= skip) {
              const CpuTicks now = read_cpu_ticks();
              if (first_.total == 0) first_ = now;
              else last_ = now;
              seen = n;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  // Stops watching; the busy fraction in [0, 1], or -1.
  double finish() {
    stop_.store(true);
    thread_.join();
    return last_.total > first_.total ? static_cast<double>(last_.busy - first_.busy) / (last_.total - first_.total)
                                      : -1.0;
  }
  ~BusySampler() {
    if (thread_.joinable()) finish();
  }

 private:
  std::atomic<bool> stop_{false};
  CpuTicks first_, last_;
  std::thread thread_;  // last: it starts once the fields above exist
};

std::string self_exe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("lmcore") : p.string();
}

// A positive tc rate ("1gbit", "100mbit", "2.5Gbit", "125mbps"): it goes into the link script's command line,
// so nothing but a number and a unit gets there.
bool is_tc_rate(const std::string& r) {
  static const std::regex rate(R"(([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)([kKmMgGtT]?(bit|bps))?)");
  return std::regex_match(r, rate);
}

}  // namespace

std::vector<BenchTable> run_fsdp_suite(const BenchOptions& options) {
  std::vector<int> rank_counts = options.quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  std::vector<std::string> nets = options.quick ? std::vector<std::string>{"loopback"}
                                                : std::vector<std::string>{"loopback", "shaped"};
  std::string rate = "1gbit";
  std::int64_t steps = options.quick ? 4 : 14;
  // Sequences per rank and step; 0: auto (see the top of this file), starting from kAutoFirstBatch.
  std::int64_t batch = 0;
  constexpr std::int64_t kAutoFirstBatch = 8, kAutoMaxBatch = 64;
  constexpr double kAutoTolerance = 0.15;
  for (const std::string& a : options.args) {
    if (a.rfind("--ranks=", 0) == 0) {
      rank_counts.clear();
      for (std::int64_t r : int_list_arg("fsdp", a, "--ranks=", 2, 64)) rank_counts.push_back(static_cast<int>(r));
    } else if (a.rfind("--net=", 0) == 0) {
      nets = name_list_arg("fsdp", a, "--net=", {"loopback", "shaped"});
    } else if (a.rfind("--rate=", 0) == 0) {
      rate = a.substr(7);
      if (!is_tc_rate(rate))
        throw BenchUsageError(fmt::format("bench fsdp: {}: expected a tc rate such as 1gbit, 100mbit or 125mbps", a));
    } else if (a.rfind("--steps=", 0) == 0) {
      steps = int_arg("fsdp", a, "--steps=", 3, 100000);
    } else if (a.rfind("--batch=", 0) == 0) {
      batch = a.substr(8) == "auto" ? 0 : int_arg("fsdp", a, "--batch=", 1, 4096);
    } else {
      fail("bench fsdp: unknown argument '{}' (expected --ranks=2,4 --net=loopback,shaped --rate=1gbit --steps=N "
           "--batch=N|auto)", a);
    }
  }
  const train::PreparedData data = train::prepare_builtin_corpus(train::default_corpus_cache_dir(), false);
  const std::string tmp =
      (std::filesystem::temp_directory_path() / fmt::format("lmcore_bench_fsdp_{}", ::getpid())).string();
  std::filesystem::create_directories(tmp);
  // A model whose step moves about as many bytes as it computes on a 1 Gbit/s link with 1 thread per rank.
  model::ModelConfig c;
  c.vocab_size = data.vocab_size;
  c.dim = 256;
  c.n_layers = 8;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.ffn_dim = 704;
  c.max_seq_len = 128;
  c.tie_embeddings = true;
  c.eos_token_id = data.eos_token;
  std::ofstream(tmp + "/config.json") << c.to_json();
  const std::string exe = self_exe();
  const std::string script = std::string(LMCORE_SOURCE_DIR) + "/bench/fsdp_netns.sh";
  const bool can_shape = ::geteuid() == 0 && std::filesystem::exists(script);

  BenchTable t;
  t.title = fmt::format("FSDP training step ({:.1f}M parameters, batch x 128 tokens per rank, 1 thread per rank)",
                        static_cast<double>(c.num_parameters()) / 1e6);
  t.columns = {"network", "ranks", "batch", "prefetch", "separate RS", "step s", "tokens/s", "exposed comm s",
               "comm s", "hidden %", "cores busy %", "x neither"};
  struct Variant {
    int prefetch;
    bool separate;
  };
  // Prefetch depth 2 as well: with 4 ranks on few cores a second unit in flight kept the link busy
  // through the longer compute gaps (2 cores, shaped: 1.04-1.06 s per step against 1.11-1.18 at depth 1).
  const std::vector<Variant> variants =
      options.quick ? std::vector<Variant>{{0, false}, {1, true}}
                    : std::vector<Variant>{{0, false}, {1, false}, {0, true}, {1, true}, {2, true}};
  // One configuration: a training run over `net`, its figures and the machine's busy fraction.
  struct Run {
    RunFigures f;
    double busy = -1;
  };
  auto run = [&](const std::string& net, int ranks, const Variant& v, std::int64_t b) {
    const std::string out = fmt::format("{}/{}_{}_{}_{}_{}", tmp, net, ranks, b, v.prefetch, v.separate);
    const std::string train_cmd = fmt::format(
        "{} train --fsdp --config {}/config.json --data '{}' --out {} --max-steps {} --batch-size {} --seq-len 128 "
        "--eval-every 1000 --threads 1 --quiet --prefetch {}{}",
        exe, tmp, data.train_glob, out, steps, b, v.prefetch, v.separate ? " --separate-rs-group" : "");
    const std::string cmd =
        net == "loopback"
            ? fmt::format("{} launch --nproc {} -- {} > {}.log 2>&1", exe, ranks, train_cmd, out)
            : fmt::format("bash {} --ranks {} --rate {} --delay 1ms -- {} > {}.log 2>&1", script, ranks, rate,
                          train_cmd, out);
    BusySampler busy(out, 2);
    const int rc = std::system(cmd.c_str());
    Run r;
    r.busy = busy.finish();
    r.f = rc == 0 ? read_run(out, 2) : RunFigures{.error = fmt::format("exit status {}", rc)};
    if (!r.f.error.empty()) {
      std::ifstream log(out + ".log");
      std::string tail((std::istreambuf_iterator<char>(log)), {});
      t.notes.push_back(fmt::format("{} {} ranks batch {} prefetch {} separate {}: {}: {}", net, ranks, b, v.prefetch,
                                    v.separate, r.f.error, tail.substr(tail.size() > 400 ? tail.size() - 400 : 0)));
    }
    return r;
  };
  for (const std::string& net : nets) {
    if (net == "shaped" && !can_shape) {
      t.notes.push_back("shaped network skipped: needs root and bench/fsdp_netns.sh");
      continue;
    }
    for (int ranks : rank_counts) {
      std::int64_t b = batch > 0 ? batch : kAutoFirstBatch;
      // The plain configuration first: the baseline of "x neither", and under auto the batch's yardstick.
      Run plain = run(net, ranks, variants[0], b);
      if (!plain.f.error.empty()) continue;
      const double compute = plain.f.step_s - plain.f.wait_s;  // the step less its waits
      std::string balance = fmt::format("{} {} ranks: compute {:.3f} s per step against collectives {:.3f} s at batch {}",
                                        net, ranks, compute, plain.f.comm_s, b);
      if (batch == 0 && net == "shaped" && compute > 0 && std::abs(plain.f.comm_s / compute - 1) > kAutoTolerance) {
        b = std::clamp<std::int64_t>(std::llround(static_cast<double>(b) * plain.f.comm_s / compute), 1, kAutoMaxBatch);
        plain = run(net, ranks, variants[0], b);
        if (!plain.f.error.empty()) continue;
        balance += fmt::format(" -> batch {} (auto): compute {:.3f} s against {:.3f} s", b,
                               plain.f.step_s - plain.f.wait_s, plain.f.comm_s);
      }
      t.notes.push_back(balance);
      const double neither = plain.f.step_s;
      for (const Variant& v : variants) {
        const Run r = &v == &variants[0] ? plain : run(net, ranks, v, b);
        if (!r.f.error.empty()) continue;
        const RunFigures& f = r.f;
        auto r3 = [](double x) { return std::round(x * 1000) / 1000; };
        t.rows.push_back({net == "shaped" ? fmt::format("shaped {}", rate) : net, ranks, b, v.prefetch,
                          v.separate ? "yes" : "no", r3(f.step_s), std::round(f.tokens_per_s), r3(f.wait_s),
                          r3(f.comm_s), f.comm_s > 0 ? std::round(1000 * (1 - f.wait_s / f.comm_s)) / 10 : -1.0,
                          r.busy >= 0 ? std::round(1000 * r.busy) / 10 : -1.0,
                          std::round(100 * neither / f.step_s) / 100});
      }
    }
  }
  t.notes.push_back(fmt::format("step s, tokens/s, exposed comm: rank 0's medians over steps 3..{}; comm s: the step's "
                                "collectives back to back with no compute (measured by the same run, same links)",
                                steps));
  t.notes.push_back(fmt::format("cores busy: all {} cores of this machine (/proc/stat: not idle, not waiting for I/O) "
                                "while steps 3..{} ran; near 100 the step is bound by the cores, not by the link",
                                std::thread::hardware_concurrency(), steps));
  if (batch == 0)
    t.notes.push_back(fmt::format("batch auto: on the shaped link each rank count runs the plain configuration at {} x "
                                  "128 tokens per rank first; where compute and collectives differ by more than {:.0f}%, "
                                  "every configuration runs at the batch scaled by collectives / compute (at most {}); "
                                  "loopback stays at {}",
                                  kAutoFirstBatch, 100 * kAutoTolerance, kAutoMaxBatch, kAutoFirstBatch));
  t.notes.push_back("shaped: bench/fsdp_netns.sh (network namespaces, veth, tc netem, or tbf rate limit where the kernel "
                    "has no netem)");
  std::filesystem::remove_all(tmp);
  return {t};
}

}  // namespace lmcore::bench
