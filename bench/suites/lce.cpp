// lmcore bench lce — fused linear cross-entropy against the unfused path (full logits): extra peak
// memory (allocation tracker), peak RSS of a fresh process per variant, and forward + backward time.
//
// Every measurement runs in a fresh child process (this executable re-run with a hidden
// --lce-child=SPEC argument), so each variant's peak RSS is its own: the parent reads it from
// wait4's rusage. A third child per configuration only builds the inputs, giving the RSS baseline.
//
// "Extra peak" is the tracker's peak during the call minus what was allocated before it (inputs,
// weight, the f32 d_weight buffer) minus d_hidden (a gradient the caller keeps).
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/suites/bench_suite.h"
#include "lmcore/core/allocator.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/loss/linear_cross_entropy.h"

namespace lmcore::bench {

namespace {

constexpr const char* kLceChildFlag = "--lce-child=";
constexpr const char* kLceResultTag = "LCE_CHILD_RESULT ";

struct Spec {
  std::string variant;  // inputs | unfused | fused
  DType dtype = DType::f32;
  std::int64_t n = 0, h = 0, v = 0;
  int repeats = 1;
  std::int64_t budget = LossOptions().memory_budget;  // the fused path's logits budget in bytes
  std::string encode() const {
    return fmt::format("{}:{}:{}:{}:{}:{}:{}", variant, dtype_name(dtype), n, h, v, repeats, budget);
  }
  static Spec decode(const std::string& s) {
    Spec spec;
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= s.size(); ++i)
      if (i == s.size() || s[i] == ':') {
        parts.push_back(s.substr(start, i - start));
        start = i + 1;
      }
    LMCORE_CHECK(parts.size() == 7, "bench lce: malformed child spec '{}'", s);
    spec.variant = parts[0];
    spec.dtype = dtype_from_name(parts[1]);
    spec.n = std::stoll(parts[2]);
    spec.h = std::stoll(parts[3]);
    spec.v = std::stoll(parts[4]);
    spec.repeats = std::stoi(parts[5]);
    spec.budget = std::stoll(parts[6]);
    return spec;
  }
};

Tensor random_tensor(const Shape& shape, std::uint32_t seed, float scale, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  const std::int64_t n = t.numel();
  parallel_for(0, n, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      std::uint32_t s = static_cast<std::uint32_t>(i) * 2654435761u + seed * 97u + 1u;
      s ^= s >> 15;
      s *= 2246822519u;
      s ^= s >> 13;
      p[i] = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * scale;
    }
  });
  return dtype == DType::f32 ? t : t.to(dtype);
}

// Runs one variant in this process and prints its result line. Returns no tables.
std::vector<BenchTable> run_child(const Spec& spec) {
  const Tensor hidden = random_tensor({spec.n, spec.h}, 1, 2.0f, spec.dtype);
  const Tensor weight = random_tensor({spec.v, spec.h}, 2, 0.2f, spec.dtype);
  Tensor target = Tensor::empty({spec.n}, DType::i64);
  for (std::int64_t i = 0; i < spec.n; ++i) target.data<std::int64_t>()[i] = (i * 7919) % spec.v;
  Tensor d_weight = Tensor::zeros({spec.v, spec.h}, DType::f32);
  // Every child, the baseline included, first runs one small GEMM so that OpenBLAS's own buffers are
  // part of the baseline RSS rather than charged to whichever variant calls it first.
  {
    const std::int64_t m = std::min<std::int64_t>(spec.n, 512), k = std::min<std::int64_t>(spec.v, 512);
    Tensor warm = matmul(hidden.narrow(0, 0, m), weight.narrow(0, 0, k).transpose(0, 1));
  }
  const Tensor grad = Tensor::full({}, 1.0, DType::f32);
  LossOptions options;  // mean, no smoothing: the common case; every option runs on the same path
  options.memory_budget = spec.budget;

  double best = 0.0, loss = 0.0;
  std::size_t extra = 0;
  std::vector<double> times;
  if (spec.variant != "inputs") {
    for (int r = 0; r < spec.repeats; ++r) {
      const std::size_t before = current_bytes();
      reset_peak_bytes();
      const auto t0 = std::chrono::steady_clock::now();
      LinearCrossEntropyOutput out =
          spec.variant == "fused"
              ? linear_cross_entropy_with_grad(hidden, weight, target, options, grad, d_weight, Tensor())
              : linear_cross_entropy_unfused_with_grad(hidden, weight, target, options, grad, d_weight, Tensor());
      const auto t1 = std::chrono::steady_clock::now();
      times.push_back(std::chrono::duration<double>(t1 - t0).count());
      extra = std::max(extra, peak_bytes() - before - out.d_hidden.nbytes());
      loss = out.loss.item_as_double();
    }
    std::sort(times.begin(), times.end());
    best = times[times.size() / 2];
  }
  nlohmann::json j = {{"seconds", best}, {"extra_peak_bytes", extra}, {"loss", loss}};
  std::printf("%s%s\n", kLceResultTag, j.dump().c_str());
  std::fflush(stdout);
  return {};
}

struct ChildResult {
  double seconds = 0.0;
  double extra_mib = 0.0;
  double rss_mib = 0.0;
  double loss = 0.0;
};

// Re-runs this executable as `lmcore bench lce --lce-child=SPEC` and collects its result and peak RSS.
ChildResult run_in_child(const Spec& spec) {
  const FreshRun run = run_bench_in_fresh_process("lce", std::string(kLceChildFlag) + spec.encode());
  const std::string& out = run.output;
  LMCORE_CHECK(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0, "bench lce: child '{}' failed (status {}): {}",
               spec.encode(), run.status, out);
  const std::size_t at = out.find(kLceResultTag);
  LMCORE_CHECK(at != std::string::npos, "bench lce: child '{}' printed no result: {}", spec.encode(), out);
  const auto j = nlohmann::json::parse(out.substr(at + std::string(kLceResultTag).size()));
  ChildResult r;
  r.seconds = j["seconds"].get<double>();
  r.extra_mib = j["extra_peak_bytes"].get<double>() / (1 << 20);
  r.loss = j["loss"].get<double>();
  r.rss_mib = run.peak_rss_bytes / (1 << 20);
  return r;
}

}  // namespace

std::vector<BenchTable> run_lce_suite(const BenchOptions& options) {
  for (const std::string& a : options.args)
    if (a.rfind(kLceChildFlag, 0) == 0) return run_child(Spec::decode(a.substr(std::string(kLceChildFlag).size())));

  // Sizes: the grid, or a small one for --quick; --n=, --h=, --v=, --dtype= pick one point,
  // --budget-mib= the fused logits budget, --repeats= timed runs per variant (the median is shown).
  std::int64_t n = options.quick ? 2048 : 4096;
  std::vector<std::int64_t> hs = options.quick ? std::vector<std::int64_t>{64} : std::vector<std::int64_t>{1024, 2048};
  std::vector<std::int64_t> vs =
      options.quick ? std::vector<std::int64_t>{4000, 16000} : std::vector<std::int64_t>{32000, 128256};
  std::vector<DType> dtypes = {DType::f32, DType::bf16};
  // --quick's logits are too small for the default budget to cut them (a tile would hold all N rows):
  // it runs at 16 MiB so that its tiles are ~260-1000 rows as in the full grid, and its fused extra
  // memory shows the same flatness in V.
  std::int64_t budget = options.quick ? std::int64_t{16} << 20 : LossOptions().memory_budget;
  int repeats = 1;
  for (const std::string& a : options.args) {
    const auto value = [&](const char* key) -> const char* {
      return a.rfind(key, 0) == 0 ? a.c_str() + std::string(key).size() : nullptr;
    };
    constexpr std::int64_t kMax = std::int64_t{1} << 31;
    if (value("--n=")) n = int_arg("lce", a, "--n=", 1, kMax);
    else if (value("--h=")) hs = {int_arg("lce", a, "--h=", 1, kMax)};
    else if (value("--v=")) vs = {int_arg("lce", a, "--v=", 1, kMax)};
    else if (value("--dtype=")) {
      dtypes.clear();
      for (const std::string& d : name_list_arg("lce", a, "--dtype=", {"f32", "bf16"})) dtypes.push_back(dtype_from_name(d));
    }
    else if (value("--budget-mib=")) budget = int_arg("lce", a, "--budget-mib=", 1, std::int64_t{1} << 30) << 20;
    else if (value("--repeats=")) repeats = static_cast<int>(int_arg("lce", a, "--repeats=", 1, 10000));
    else fail("bench lce: unknown argument '{}' (expected --n=, --h=, --v=, --dtype=, --budget-mib=, --repeats=)", a);
  }

  BenchTable detail{fmt::format("lce: linear cross-entropy forward+backward, N = {} tokens, mean reduction", n),
                    {"dtype", "H", "V", "variant", "fwd+bwd s", "extra peak MiB", "peak RSS MiB",
                     "RSS above inputs MiB", "loss"},
                    {},
                    {}};
  BenchTable ratios{"lce: unfused / fused",
                    {"dtype", "H", "V", "extra peak x", "RSS above inputs x", "time x (>1: fused faster)"},
                    {},
                    {}};
  for (DType dtype : dtypes)
    for (std::int64_t h : hs)
      for (std::int64_t v : vs) {
        const ChildResult base = run_in_child({"inputs", dtype, n, h, v, 1, budget});
        const ChildResult u = run_in_child({"unfused", dtype, n, h, v, repeats, budget});
        const ChildResult f = run_in_child({"fused", dtype, n, h, v, repeats, budget});
        for (const auto& [name, r] : {std::pair<const char*, const ChildResult&>{"unfused", u}, {"fused", f}})
          detail.rows.push_back({std::string(dtype_name(dtype)), h, v, name, r.seconds, r.extra_mib, r.rss_mib,
                                 r.rss_mib - base.rss_mib, r.loss});
        ratios.rows.push_back({std::string(dtype_name(dtype)), h, v, u.extra_mib / f.extra_mib,
                               (u.rss_mib - base.rss_mib) / std::max(f.rss_mib - base.rss_mib, 1.0),
                               u.seconds / f.seconds});
      }
  detail.notes.push_back(fmt::format(
      "fused tiling: automatic from a {} MiB logits budget (whole vocabulary per tile when >= 64 rows fit); "
      "each GEMM step one single-threaded BLAS call per thread on a vocabulary slice; bf16 on the matrix units "
      "({}), forward + backward with the tile transposed: whole vocabulary when >= 160 rows fit, else 4096-row "
      "tiles of vocabulary chunks (two passes)",
      budget >> 20, lowp_gemm_path_description(DType::bf16)));
  detail.notes.push_back(
      "extra peak: allocation tracker, above inputs + weight + f32 d_weight buffer + d_hidden; peak RSS: ru_maxrss "
      "of a fresh process per variant; 'inputs' child = same process building the inputs only");
  detail.notes.push_back(fmt::format("lmcore threads: {}; {} timed run(s) per variant in its fresh process",
                                     num_threads(), repeats));
  ratios.notes.push_back("targets: extra peak >= 20x lower at V = 128256, fused extra flat in V, time x >= 1");
  return {detail, ratios};
}

}  // namespace lmcore::bench
