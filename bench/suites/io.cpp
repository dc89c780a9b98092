// lmcore bench io — checkpoint loading against the floor (`cat FILE > /dev/null`) and torch 1.13.
//
// A state dict of f32 and bf16 tensors (~1 GiB; --quick: ~64 MiB) is written once with lmcore's own
// writers as safetensors and as a PyTorch zip (.pt) in a temporary directory. All timings are with a
// warm page cache (the files were just written and are read once before timing; nothing is dropped):
// they measure the loaders' own cost, not the disk. Rows:
//   * cat FILE > /dev/null                 the floor for reading every byte (one process, from cache)
//   * load() alone                         safetensors / .pt: map, parse, build tensor views
//   * load() + first access                touches the first byte of the first tensor
//   * load() + read every byte             a checksum over every tensor's bytes
//   * torch.load (weights_only, default)   torch 1.13 in /usr/bin/python3, timed inside Python
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench/suites/bench_suite.h"
#include "lmcore/core/parallel.h"
#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/io/torch_format.h"

namespace lmcore::bench {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sum of every 8-byte word of every tensor (tail bytes added one by one): reads every byte once.
std::uint64_t checksum(const io::StateDict& sd) {
  std::uint64_t total = 0;
  for (const auto& e : sd) {
    const auto* p = static_cast<const unsigned char*>(e.tensor.data_ptr());
    const std::size_t n = e.tensor.nbytes();
    const std::size_t words = n / 8;
    std::atomic<std::uint64_t> sum{0};
    parallel_for(0, static_cast<std::int64_t>(words), 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
      std::uint64_t s = 0;
      for (std::int64_t i = lo; i < hi; ++i) {
        std::uint64_t w;
        std::memcpy(&w, p + 8 * i, 8);
        s += w;
      }
      sum += s;
    });
    total += sum.load();
    for (std::size_t i = words * 8; i < n; ++i) total += p[i];
  }
  return total;
}

double time_cat(const std::string& path) {
  const std::string cmd = "cat '" + path + "' > /dev/null";
  return time_median([&] { LMCORE_CHECK(std::system(cmd.c_str()) == 0, "bench io: '{}' failed", cmd); }, 5);
}

// Median seconds of torch.load(path, weights_only=True) and of torch.load(path) over `repeats` each,
// timed inside one /usr/bin/python3 process (one torch import); {-1, -1} and `error` when torch fails.
std::pair<double, double> time_torch_load(const std::string& path, int repeats, std::string& error) {
  const std::string script =
      "import sys, time, statistics, torch\n"
      "torch.set_num_threads(1)\n"
      "p, n = sys.argv[1], int(sys.argv[2])\n"
      "out = []\n"
      "for wo in (True, False):\n"
      "    torch.load(p, weights_only=wo)\n"
      "    ts = []\n"
      "    for _ in range(n):\n"
      "        t = time.perf_counter(); sd = torch.load(p, weights_only=wo); ts.append(time.perf_counter() - t); del sd\n"
      "    out.append(statistics.median(ts))\n"
      "print(out[0], out[1])\n";
  ::setenv("LMCORE_BENCH_SCRIPT", script.c_str(), 1);
  const std::string cmd = "/usr/bin/python3 -c \"$LMCORE_BENCH_SCRIPT\" '" + path + "' " + std::to_string(repeats) + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) {
    error = "popen failed";
    return {-1, -1};
  }
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), f)) out += buf;
  double wo = -1, def = -1;
  if (::pclose(f) != 0 || std::sscanf(out.c_str(), "%lf %lf", &wo, &def) != 2) {
    error = out.substr(0, 200);
    return {-1, -1};
  }
  return {wo, def};
}

}  // namespace

std::vector<BenchTable> run_io_suite(const BenchOptions& options) {
  // 1. The state dict: layers of f32 weights and bf16 embeddings-like tensors.
  const int pairs = options.quick ? 32 : 128;
  const std::int64_t rows = options.quick ? 256 : 1024;
  io::NamedTensors sd;
  for (int i = 0; i < pairs; ++i) {
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor t = Tensor::empty({rows, dt == DType::f32 ? 1536 : 1024}, dt);
      auto* p = static_cast<std::uint32_t*>(t.data_ptr());
      const std::int64_t words = static_cast<std::int64_t>(t.nbytes() / 4);
      parallel_for(0, words, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t k = lo; k < hi; ++k) p[k] = static_cast<std::uint32_t>(k * 2654435761u + i);
      });
      sd.emplace_back(fmt::format("layers.{}.{}", i, dt == DType::f32 ? "mlp.weight" : "emb.weight"), t);
    }
  }
  std::uint64_t total = 0;
  for (const auto& [n, t] : sd) total += t.nbytes();

  char tmpl[] = "/tmp/lmcore_bench_io_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string st_path = dir + "/model.safetensors", pt_path = dir + "/model.pt";
  double t0 = now_s();
  io::save_safetensors(st_path, sd);
  const double save_st = now_s() - t0;
  t0 = now_s();
  io::save_torch(pt_path, sd);
  const double save_pt = now_s() - t0;
  sd.clear();  // free the source tensors before measuring

  // 2. Timings (warm cache: each file is read once first).
  const double cat_st = time_cat(st_path), cat_pt = time_cat(pt_path);
  const int reps = options.quick ? 3 : 7;
  std::uint64_t sink = 0;
  const double st_open = time_median([&] { sink += io::load(st_path).tensors.size(); }, reps);
  const double st_first = time_median([&] {
    const auto r = io::load(st_path);
    sink += *static_cast<const unsigned char*>(r.tensors.entries().front().tensor.data_ptr());
  }, reps);
  const double st_all = time_median([&] { sink += checksum(io::load(st_path).tensors); }, reps);
  const double pt_open = time_median([&] { sink += io::load(pt_path).tensors.size(); }, reps);
  const double pt_all = time_median([&] { sink += checksum(io::load(pt_path).tensors); }, reps);

  std::string err_wo;
  const auto [torch_wo, torch_def] = time_torch_load(pt_path, options.quick ? 2 : 3, err_wo);
  const std::string err_def = err_wo;
  std::filesystem::remove_all(dir);

  // 3. Tables.
  const double gb = static_cast<double>(total) / 1e9;
  BenchTable t{fmt::format("io: load a state dict of {} tensors (f32 + bf16), {:.0f} MiB, warm page cache",
                           2 * pairs, static_cast<double>(total) / (1 << 20)),
               {"case", "ms", "GB/s", "x cat (same file)"},
               {},
               {}};
  auto row = [&](const std::string& name, double s, double cat) {
    t.rows.push_back({name, s * 1e3, gb / s, cat > 0 ? s / cat : 0.0});
  };
  row("cat model.safetensors > /dev/null", cat_st, cat_st);
  row("safetensors: load() alone", st_open, cat_st);
  row("safetensors: load() + first access", st_first, cat_st);
  row("safetensors: load() + read every byte", st_all, cat_st);
  row("cat model.pt > /dev/null", cat_pt, cat_pt);
  row("pt: load() alone", pt_open, cat_pt);
  row("pt: load() + read every byte", pt_all, cat_pt);
  if (torch_wo > 0) row("torch 1.13 torch.load(weights_only=True)", torch_wo, cat_pt);
  else t.notes.push_back("torch.load(weights_only=True) not measured: " + err_wo);
  if (torch_def > 0) row("torch 1.13 torch.load() default", torch_def, cat_pt);
  else t.notes.push_back("torch.load() not measured: " + err_def);
  t.notes.push_back(fmt::format("writers: save_safetensors {:.0f} ms, save_torch {:.0f} ms (fsync included)",
                                save_st * 1e3, save_pt * 1e3));
  t.notes.push_back(fmt::format("lmcore threads: {} (checksum); torch: 1 thread; checksum sink {}", num_threads(),
                                sink % 10));
  t.notes.push_back("warm page cache throughout: nothing is dropped, so cat is the cost of copying from the cache");

  BenchTable targets{"io: targets", {"target", "measured", "goal", "met"}, {}, {}};
  const double best_torch = torch_wo > 0 && torch_def > 0 ? std::min(torch_wo, torch_def) : std::max(torch_wo, torch_def);
  if (torch_wo > 0) {
    targets.rows.push_back({"torch.load(weights_only=True) / lmcore pt load()", torch_wo / pt_open, ">= 10x",
                            torch_wo / pt_open >= 10 ? "yes" : "no"});
    targets.rows.push_back({"faster torch.load mode / lmcore pt load() + read every byte", best_torch / pt_all,
                            "(for reference)", "-"});
  }
  targets.rows.push_back({"pt load() + read every byte / cat", pt_all / cat_pt, "<= 1.5x", pt_all / cat_pt <= 1.5 ? "yes" : "no"});
  targets.rows.push_back({"safetensors load() + read every byte / cat", st_all / cat_st, "<= 1.5x",
                          st_all / cat_st <= 1.5 ? "yes" : "no"});
  targets.rows.push_back({"safetensors open (ms)", st_open * 1e3, "< 5 ms", st_open < 0.005 ? "yes" : "no"});
  return {t, targets};
}

}  // namespace lmcore::bench
