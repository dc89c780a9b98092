// lmcore bench train — training throughput of lmcore's Llama against torch 1.13 eager training of the
// same model (tests/python/llama_reference.py through bench/torch_train.py), same batch, same threads,
// f32 and bf16 (torch.autocast for torch). Each side runs in its own fresh process (lmcore's re-executes
// this binary with --train-child=MODEL,DTYPE,STEPS), so peak RSS is that training's alone. MFU = model flops (6 x matmul parameters + the attention products per token) over
// the f32 sgemm / bf16 GEMM rate measured in this same run.
//
// Models: the built-in default (6 layers, dim 384, byte vocabulary, B 8 x T 256) and a GPT-2-small-sized
// one (12 layers, dim 768, 12 heads, ffn 2048, vocab 32000, B 1 x T 1024). --quick: the default model
// only, fewer steps. --models=default,gpt2 and --dtypes=f32,bf16 pick a subset; --steps=N;
// --keep-gate-up=auto|on|off sets ModelOptions::keep_gate_up (auto: the model's size rule).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "bench/suites/bench_suite.h"
#include "lmcore/core/allocator.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/core/runtime_info.h"
#include "lmcore/model/gemm_peak.h"
#include "lmcore/model/llama.h"
#include "lmcore/train/adamw.h"

namespace lmcore::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct TrainCase {
  std::string name;
  model::ModelConfig config;
  std::int64_t batch, seq;
};

std::vector<TrainCase> cases() {
  model::ModelConfig d;
  d.vocab_size = 4096;  // the built-in default: BPE on the Python standard library (builtin_corpus.h)
  d.dim = 384;
  d.n_layers = 6;
  d.n_heads = 6;
  d.n_kv_heads = 2;
  d.ffn_dim = 1024;
  d.max_seq_len = 256;
  d.tie_embeddings = true;
  model::ModelConfig g;
  g.vocab_size = 32000;
  g.dim = 768;
  g.n_layers = 12;
  g.n_heads = 12;
  g.n_kv_heads = 12;
  g.ffn_dim = 2048;
  g.max_seq_len = 1024;
  g.tie_embeddings = true;
  return {{"default", d, 8, 256}, {"gpt2", g, 1, 1024}};
}

struct Measured {
  double tokens_per_s = -1, step_s = -1, peak_rss = -1, loss0 = 0;
  std::string torch_version;  // torch's side: the version that ran
  std::string error;
};

constexpr const char* kTrainChildFlag = "--train-child=";

// --keep-gate-up=auto|on|off as ModelOptions::keep_gate_up.
std::optional<bool> keep_gate_up_from(const std::string& s) {
  if (s == "auto") return std::nullopt;
  if (s == "on" || s == "off") return s == "on";
  fail("bench train: --keep-gate-up must be auto, on or off, found '{}'", s);
}
constexpr const char* kTrainResultTag = "lmcore-train-child: ";

// One measurement, in the process `lmcore bench train --train-child=MODEL,DTYPE,STEPS,KEEP`: `steps` timed
// optimizer steps after one warm-up. Returns "tokens/s step_s first_loss" (or "error ..."); run_lmcore
// takes the peak RSS from the process's end.
std::string measure_lmcore(const TrainCase& c, DType dtype, int steps, std::optional<bool> keep_gate_up) {
  std::string out;
  try {
    model::Llama m(c.config, {.batch = c.batch, .seq_len = c.seq, .compute = dtype, .keep_gate_up = keep_gate_up});
    m.init_weights(1);
    train::AdamW opt(m.layout(), {});
    std::vector<std::int32_t> x(static_cast<std::size_t>(c.batch * c.seq)), y(x.size());
    std::uint64_t s = 1;
    for (std::size_t i = 0; i < x.size(); ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x[i] = static_cast<std::int32_t>((s >> 33) % c.config.vocab_size);
      y[i] = static_cast<std::int32_t>((s >> 13) % c.config.vocab_size);
    }
    std::vector<double> times;
    double loss0 = 0;
    for (int i = 0; i < 1 + steps; ++i) {
      const auto t = Clock::now();
      m.zero_grad();
      const double loss = m.forward_backward(x.data(), y.data(), 1.0f).loss;
      float* g = m.grads().data<float>();
      const double norm = std::sqrt(train::grad_norm_squared(g, m.layout().size()));
      train::clip_grad_norm(g, m.layout().size(), norm, 1.0);
      opt.step(m.params().data<float>(), g, 1e-4);
      m.params_updated();
      if (i == 0) loss0 = loss;
      if (i >= 1) times.push_back(std::chrono::duration<double>(Clock::now() - t).count());
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    out = fmt::format("{} {} {}", static_cast<double>(c.batch * c.seq) / med, med, loss0);
  } catch (const std::exception& e) {
    out = std::string("error ") + e.what();
  }
  return out;
}

// Runs measure_lmcore in a fresh process (run_bench_in_fresh_process): a forked child without exec
// shares the parent's resident pages, which its peak RSS then counts (the GPT-2-sized rows read ~800 MiB
// more than the training itself held), and would inherit a pool without its threads.
Measured run_lmcore(const TrainCase& c, const std::string& dtype, int steps, const std::string& keep_gate_up) {
  const FreshRun run =
      run_bench_in_fresh_process("train", fmt::format("{}{},{},{},{}", kTrainChildFlag, c.name, dtype, steps, keep_gate_up));
  Measured r;
  const std::size_t at = run.output.find(kTrainResultTag);
  if (at == std::string::npos || !WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0) {
    r.error = fmt::format("worker exited with status {}: {}", run.status, run.output.substr(0, 300));
    return r;
  }
  const std::string result = run.output.substr(at + std::string(kTrainResultTag).size());
  if (result.rfind("error", 0) == 0) {
    r.error = result;
    return r;
  }
  std::sscanf(result.c_str(), "%lf %lf %lf", &r.tokens_per_s, &r.step_s, &r.loss0);
  r.peak_rss = run.peak_rss_bytes;  // the whole process, as torch's side reports
  return r;
}

Measured run_torch(const TrainCase& c, DType dtype, int steps, const std::string& config_path) {
  const std::string script = std::string(LMCORE_SOURCE_DIR) + "/bench/torch_train.py";
  const std::string cmd = fmt::format("/usr/bin/python3 {} --config {} --batch {} --seq {} --dtype {} --steps {} "
                                      "--threads {} 2>&1",
                                      script, config_path, c.batch, c.seq, dtype_name(dtype), steps, num_threads());
  FILE* f = ::popen(cmd.c_str(), "r");
  Measured r;
  if (!f) {
    r.error = "popen failed";
    return r;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  const int rc = ::pclose(f);
  const auto brace = out.rfind('{');
  if (rc != 0 || brace == std::string::npos) {
    r.error = "torch: " + out.substr(0, 300);
    return r;
  }
  const auto j = nlohmann::json::parse(out.substr(brace), nullptr, false);
  if (j.is_discarded()) {
    r.error = "torch printed: " + out.substr(0, 300);
    return r;
  }
  r.tokens_per_s = j["tokens_per_s"];
  r.step_s = j["step_s"];
  r.peak_rss = j["peak_rss_bytes"];
  r.loss0 = j["losses"][0];
  r.torch_version = j.value("torch", std::string("?"));
  return r;
}


}  // namespace

std::vector<BenchTable> run_train_suite(const BenchOptions& options) {
  for (const std::string& a : options.args)
    if (a.rfind(kTrainChildFlag, 0) == 0) {  // the worker process of run_lmcore
      const std::vector<std::string> spec = split_commas(a.substr(std::string(kTrainChildFlag).size()));
      LMCORE_CHECK(spec.size() == 4, "bench train: {} wants MODEL,DTYPE,STEPS,KEEP, got '{}'", kTrainChildFlag, a);
      for (const TrainCase& c : cases())
        if (c.name == spec[0]) {
          std::printf("%s%s\n", kTrainResultTag,
                      measure_lmcore(c, dtype_from_name(spec[1]), std::stoi(spec[2]), keep_gate_up_from(spec[3])).c_str());
          std::fflush(stdout);
          return {};
        }
      fail("bench train: {}: no model '{}'", kTrainChildFlag, spec[0]);
    }
  std::vector<std::string> models = options.quick ? std::vector<std::string>{"default"}
                                                  : std::vector<std::string>{"default", "gpt2"};
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int steps = options.quick ? 2 : 3;
  std::string keep_gate_up = "auto";
  for (const std::string& a : options.args) {
    if (a.rfind("--models=", 0) == 0) models = name_list_arg("train", a, "--models=", {"default", "gpt2"});
    else if (a.rfind("--dtypes=", 0) == 0) dtypes = name_list_arg("train", a, "--dtypes=", {"f32", "bf16"});
    else if (a.rfind("--steps=", 0) == 0) steps = static_cast<int>(int_arg("train", a, "--steps=", 1, 100000));
    else if (a.rfind("--keep-gate-up=", 0) == 0) keep_gate_up = name_arg("train", a, "--keep-gate-up=", {"auto", "on", "off"});
    else fail("bench train: unknown argument '{}' (expected --models=default,gpt2 --dtypes=f32,bf16 --steps=N "
              "--keep-gate-up=auto|on|off)", a);
  }
  const std::optional<bool> keep = keep_gate_up_from(keep_gate_up);
  const std::string tmp = (std::filesystem::temp_directory_path() / fmt::format("lmcore_bench_train_{}", ::getpid())).string();
  std::filesystem::create_directories(tmp);
  BenchTable t;
  t.columns = {"model", "params", "dtype", "B x T", "lmcore tok/s", "torch tok/s", "x torch", "lmcore MFU",
               "torch MFU", "lmcore RSS MiB", "torch RSS MiB", "RSS / torch"};
  // Every measurement of lmcore runs in its own process (run_lmcore), torch's in its own Python process.
  struct Row {
    const TrainCase* c;
    std::string dtype;
    double flops;
    Measured ours, theirs;
  };
  std::vector<Row> measured;
  const std::vector<TrainCase> all = cases();
  for (const TrainCase& c : all) {
    if (std::find(models.begin(), models.end(), c.name) == models.end()) continue;
    const std::string cfg_path = tmp + "/" + c.name + ".json";
    std::ofstream(cfg_path) << c.config.to_json();
    const model::Llama probe(c.config, {.batch = c.batch, .seq_len = c.seq});
    const double flops = probe.flops_per_step();
    for (const std::string& d : dtypes) {
      const DType dt = dtype_from_name(d);
      measured.push_back({&c, d, flops, run_lmcore(c, d, steps, keep_gate_up), run_torch(c, dt, steps, cfg_path)});
    }
    t.notes.push_back(fmt::format("{}: each block's gate|up product {} (--keep-gate-up={})", c.name,
                                  keep.value_or(model::keep_gate_up_rule(c.config)) ? "kept for the backward"
                                                                                    : "recomputed in the backward",
                                  keep_gate_up));
  }
  // The peer is whatever torch /usr/bin/python3 imports (1.13 on Debian 12): the title names the one that ran.
  std::string torch_version = "(not run)";
  for (const Row& row : measured)
    if (!row.theirs.torch_version.empty()) torch_version = row.theirs.torch_version;
  t.title = fmt::format("lmcore train vs torch {} eager (same model, batch, threads; one optimizer step = fwd + bwd + AdamW)",
                        torch_version);
  std::map<std::string, double> peak;
  for (const std::string& d : dtypes) peak[d] = model::gemm_peak_gflops(dtype_from_name(d), 1024, 3.0);
  for (const Row& row : measured) {
    const TrainCase& c = *row.c;
    const std::string& d = row.dtype;
    const double flops = row.flops;
    const Measured& ours = row.ours;
    const Measured& theirs = row.theirs;
    {
      if (!ours.error.empty()) t.notes.push_back(c.name + " " + d + " lmcore: " + ours.error);
      if (!theirs.error.empty()) t.notes.push_back(c.name + " " + d + " torch: " + theirs.error);
      auto num = [](double v, int prec) { return v < 0 ? nlohmann::json("-") : nlohmann::json(std::round(v * std::pow(10, prec)) / std::pow(10, prec)); };
      const double mfu_ours = ours.step_s > 0 ? flops / ours.step_s / (peak[d] * 1e9) : -1;
      const double mfu_theirs = theirs.step_s > 0 ? flops / theirs.step_s / (peak[d] * 1e9) : -1;
      t.rows.push_back({c.name, fmt::format("{:.1f}M", static_cast<double>(c.config.num_parameters()) / 1e6), d,
                        fmt::format("{} x {}", c.batch, c.seq), num(ours.tokens_per_s, 0), num(theirs.tokens_per_s, 0),
                        ours.tokens_per_s > 0 && theirs.tokens_per_s > 0 ? num(ours.tokens_per_s / theirs.tokens_per_s, 2) : "-",
                        num(mfu_ours * 100, 1), num(mfu_theirs * 100, 1), num(ours.peak_rss / (1 << 20), 0),
                        num(theirs.peak_rss / (1 << 20), 0),
                        ours.peak_rss > 0 && theirs.peak_rss > 0 ? num(ours.peak_rss / theirs.peak_rss, 2) : "-"});
      if (ours.loss0 > 0 && theirs.loss0 > 0)
        t.notes.push_back(fmt::format("{} {}: first-step loss lmcore {:.4f}, torch {:.4f} (same init rule, different draws)",
                                      c.name, d, ours.loss0, theirs.loss0));
    }
  }
  for (const auto& [d, gf] : peak)
    t.notes.push_back(fmt::format("{} GEMM rate this run (1024^3 through the model's GEMM path, best of 3 s): {:.0f} GFLOPS; MFU is against it", d, gf));
  t.notes.push_back(fmt::format("threads {} (lmcore and torch.set_num_threads); SIMD {}; median of {} timed steps after "
                                "1 warm-up; load average at the end {}",
                                num_threads(), simd_target_name(), steps, [] {
                                  std::ifstream in("/proc/loadavg");
                                  std::string s;
                                  std::getline(in, s);
                                  return s.substr(0, s.find(' ', s.find(' ', s.find(' ') + 1) + 1));
                                }()));
  std::filesystem::remove_all(tmp);
  return {t};
}

}  // namespace lmcore::bench
