// lmcore bench codegen — generated kernels against their alternatives, in one run:
//   rmsnorm  RMSNorm forward + backward in GB/s (generated, generic) beside a parallel memcpy's bandwidth
//            and torch 1.13's RMSNorm in torch ops (bench/torch_rmsnorm.py), f32 and bf16
//   gemm     gate/up GEMM + SwiGLU fused vs the GEMM then a separate SwiGLU pass, and down GEMM + residual
//            fused vs copy + GEMM accumulating (the trainer's two ways), at the trainer's shapes
//   compile  cold compile per kernel, the default model's kernels (tuning candidates included) with 1
//            and with all workers, and the warm-cache load of a model's kernels in a fresh process
//   train    forward + backward tokens/s of the default model with and without ModelOptions::codegen
// `lmcore bench codegen [rmsnorm] [gemm] [compile] [train]` runs a subset (compile timings are
// distorted by anything that pauses compilers, e.g. /work/notes/quiet.sh: run that section alone).
// Bytes of RMSNorm fwd + bwd: 6 N C x dtype size (forward reads x and writes y; backward reads dy and
// x and reads and writes dx, which it adds into), the same count for torch.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "bench/suites/bench_suite.h"
#include "lmcore/base/aligned_allocator.h"
#include "lmcore/codegen/gemm.h"
#include "lmcore/codegen/model_kernels.h"
#include "lmcore/codegen/rmsnorm.h"
#include "lmcore/codegen/runtime.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/model/layers.h"
#include "lmcore/model/llama.h"

namespace lmcore::bench {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Buffers on 64-byte boundaries, as the trainer's arena and parameters are.
using Floats = std::vector<float, CacheAlignedAllocator<float>>;

Floats random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  Floats v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

BenchTable rmsnorm_table(const BenchOptions& opt, const codegen::Options& co) {
  const std::int64_t N = opt.quick ? 1024 : 4096, C = 4096, NC = N * C;
  const double budget = opt.quick ? 0.5 : 1.5;
  BenchTable t{fmt::format("codegen: RMSNorm forward + backward, {} x {}, {} threads", N, C, num_threads()),
               {"kernel", "dtype", "ms", "GB/s", "% of copy", "x torch"},
               {},
               {}};
  // Copy bandwidth: 2 NC floats read and written, cut over the threads as the kernels are: the same
  // working set as the f32 kernel's four (N, C) tensors (this machine's L3 may hold it all; both then
  // run from the same level).
  const std::int64_t copy_n = 2 * NC;
  Floats src = random_floats(static_cast<std::size_t>(copy_n), 1), dst(static_cast<std::size_t>(copy_n));
  const double t_copy = time_best(
      [&] {
        parallel_for(0, copy_n, 1 << 16, [&](std::int64_t b, std::int64_t e) {
          std::memcpy(dst.data() + b, src.data() + b, static_cast<std::size_t>(e - b) * 4);
        });
      },
      budget);
  const double copy_gbs = 2.0 * copy_n * 4 / t_copy / 1e9;
  t.rows.push_back({"memcpy (read + write)", "f32", t_copy * 1e3, copy_gbs, 100.0, ""});

  for (auto dt : {codegen::DType::f32, codegen::DType::bf16}) {
    const double bytes = 6.0 * NC * codegen::dtype_size(dt);
    double torch_s = NAN;
    std::string torch_version = "?";
    try {
      const auto j = run_python_peer("torch_rmsnorm.py", fmt::format("--threads {} --rows {} --hidden {} --dtype {} --budget {}",
                                                                     num_threads(), N, C, codegen::dtype_name(dt), budget));
      torch_s = j["seconds"].get<double>();
      torch_version = j.value("torch", torch_version);
    } catch (const std::exception& e) {
      t.notes.push_back(std::string("torch: ") + e.what());
    }
    const codegen::RmsNormSpec spec{C, 1e-5f, dt, dt, false};
    const auto gen = codegen::RmsNormKernel::get(spec, co);
    const auto generic = codegen::RmsNormKernel::generic(spec);
    const std::size_t esz = codegen::dtype_size(dt);
    using Bytes = std::vector<unsigned char, CacheAlignedAllocator<unsigned char>>;  // rows on line boundaries
    Bytes x(static_cast<std::size_t>(NC) * esz), y(x.size()), dy(x.size()), dx(x.size());
    for (std::size_t i = 0; i < x.size(); i += 2) {  // bf16 bits of values near 1 (f32: arbitrary finite)
      x[i + 1] = 0x3f;
      dy[i + 1] = 0x3f;
    }
    Floats w = random_floats(static_cast<std::size_t>(C), 2), dw(static_cast<std::size_t>(C)),
                       rstd(static_cast<std::size_t>(N));
    for (const auto* k : {&gen, &generic}) {
      if (k == &gen && !gen.generated()) {
        t.notes.push_back("generated kernel unavailable: " + gen.why_generic());
        continue;
      }
      const double s = time_best(
          [&] {
            k->forward(y.data(), rstd.data(), x.data(), nullptr, nullptr, w.data(), N);
            k->backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N);
          },
          budget);
      t.rows.push_back({k == &gen ? "generated " + k->variant() : std::string("generic (precompiled)"),
                        codegen::dtype_name(dt), s * 1e3, bytes / s / 1e9, 100.0 * bytes / s / 1e9 / copy_gbs,
                        std::isnan(torch_s) ? nlohmann::json("") : nlohmann::json(torch_s / s)});
    }
    if (!std::isnan(torch_s))
      t.rows.push_back({"torch " + torch_version + " (torch ops, autograd)", codegen::dtype_name(dt), torch_s * 1e3,
                        bytes / torch_s / 1e9, 100.0 * bytes / torch_s / 1e9 / copy_gbs, 1.0});
  }
  t.notes.push_back(fmt::format("bytes of fwd + bwd: 6 N C x dtype size; copy: 2 x 2 N C x 4 (same working set as f32); load average {:.1f}",
                                load_average_1min()));
  return t;
}

// The unfused pair, as the trainer's regular path does it: gemm_f32 cut over the threads by rows, then
// the trainer's element-wise pass (model::swiglu_forward / swiglu_backward, Highway).
void sgemm_rows(std::int64_t M, std::int64_t N, std::int64_t K, const float* a, const float* b, float beta, float* c,
                bool b_trans = true) {
  const BlasSingleThreaded guard;
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(num_threads(), M / 64));
  parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t lo = M * p / parts / 16 * 16, hi = p + 1 == parts ? M : M * (p + 1) / parts / 16 * 16;
      gemm_f32(false, b_trans, hi - lo, N, K, 1.0f, a + lo * K, K, b, b_trans ? K : N, beta, c + lo * N, N);
    }
  });
}

BenchTable gemm_table(const BenchOptions& opt, const codegen::Options& co) {
  const std::int64_t M = 2048, C = 384, F = 1024;  // the default model at batch 8 x 256 tokens
  const double budget = opt.quick ? 0.5 : 1.5;
  BenchTable t{fmt::format("codegen: GEMM + epilogue fused vs unfused, M = {} tokens (default model), {} threads", M,
                           num_threads()),
               {"product", "variant", "fused ms", "unfused ms", "fused speed-up", "GEMM alone ms", "fusion bound"},
               {},
               {}};
  const auto h = random_floats(static_cast<std::size_t>(M * C), 1), wgu = random_floats(static_cast<std::size_t>(2 * F * C), 2);
  const auto act = random_floats(static_cast<std::size_t>(M * F), 3), wdown = random_floats(static_cast<std::size_t>(C * F), 4);
  const auto xmid = random_floats(static_cast<std::size_t>(M * C), 5);
  Floats gu(static_cast<std::size_t>(M * 2 * F)), a(static_cast<std::size_t>(M * F)),
      out(static_cast<std::size_t>(M * C));
  {
    const auto k = codegen::GemmKernel::get({F, C, true, false, codegen::Act::swiglu, false, true}, M, co);
    const double fused = time_best(
        [&] { k.run({h.data(), C, wgu.data(), C, a.data(), F, gu.data(), 2 * F}, M); }, budget);
    const double unfused = time_best(
        [&] {
          sgemm_rows(M, 2 * F, C, h.data(), wgu.data(), 0.0f, gu.data());
          model::swiglu_forward(a.data(), gu.data(), M, F);
        },
        budget);
    const double alone = time_best([&] { sgemm_rows(M, 2 * F, C, h.data(), wgu.data(), 0.0f, gu.data()); }, budget);
    t.rows.push_back({fmt::format("gate/up ({}x{}x{}) + SwiGLU", M, 2 * F, C), k.variant(), fused * 1e3,
                      unfused * 1e3, unfused / fused, alone * 1e3, unfused / alone});
  }
  {
    const auto k = codegen::GemmKernel::get({C, F, true, false, codegen::Act::none, true, false}, M, co);
    const double fused = time_best(
        [&] { k.run({.a = act.data(), .lda = F, .b = wdown.data(), .ldb = F, .c = out.data(), .ldc = C,
                     .residual = xmid.data(), .ldr = C}, M); },
        budget);
    const double unfused = time_best(
        [&] {
          std::memcpy(out.data(), xmid.data(), out.size() * 4);
          sgemm_rows(M, C, F, act.data(), wdown.data(), 1.0f, out.data());
        },
        budget);
    const double alone = time_best([&] { sgemm_rows(M, C, F, act.data(), wdown.data(), 0.0f, out.data()); }, budget);
    t.rows.push_back({fmt::format("down ({}x{}x{}) + residual", M, C, F), k.variant(), fused * 1e3, unfused * 1e3,
                      unfused / fused, alone * 1e3, unfused / alone});
  }
  {
    // Backward: da (M, F) = dx (M, C) @ Wdown (C, F), then the SwiGLU backward into dgu (M, 2F).
    const auto k = codegen::GemmKernel::get({F, C, false, false, codegen::Act::dswiglu, false, false}, M, co);
    Floats da(static_cast<std::size_t>(M * F)), dgu(static_cast<std::size_t>(M * 2 * F));
    const double fused = time_best(
        [&] { k.run({.a = xmid.data(), .lda = C, .b = wdown.data(), .ldb = F, .c = dgu.data(), .ldc = 2 * F,
                     .aux = gu.data(), .ldx = 2 * F}, M); },
        budget);
    const double unfused = time_best(
        [&] {
          sgemm_rows(M, F, C, xmid.data(), wdown.data(), 0.0f, da.data(), false);
          model::swiglu_backward(dgu.data(), da.data(), gu.data(), M, F);
        },
        budget);
    const double alone = time_best([&] { sgemm_rows(M, F, C, xmid.data(), wdown.data(), 0.0f, da.data(), false); }, budget);
    t.rows.push_back({fmt::format("down d_input ({}x{}x{}) + SwiGLU backward", M, F, C), k.variant(), fused * 1e3,
                      unfused * 1e3, unfused / fused, alone * 1e3, unfused / alone});
  }
  t.notes.push_back(fmt::format("unfused (the trainer's --codegen off path): gemm_f32 per thread row block, "
                                "then the trainer's Highway SwiGLU pass / memcpy of the residual then gemm_f32 with beta 1 "
                                "/ gemm_f32 then the SwiGLU backward pass; fusion bound = unfused / GEMM alone: the most "
                                "any fusion over the same GEMM core could gain; load average {:.1f}",
                                load_average_1min()));
  t.notes.push_back("gemm_f32 here: " + f32_gemm_path_description());
  return t;
}

// Runs `fn` in a forked child and returns what it returns (NAN when the child fails): phases that must
// not see kernels this process already loaded.
double in_child(const std::function<double()>& fn) {
  std::vector<double> secs;
  const int best = codegen::time_candidates_in_children(1, [&](std::size_t) { return fn(); }, 600.0, &secs);
  return best < 0 ? NAN : secs[0];
}

BenchTable compile_table(const BenchOptions&, codegen::Options co) {
  const int all = co.workers;
  BenchTable t{"codegen: compile and load (fresh cache directories)", {"what", "kernels", "workers", "seconds", "per kernel ms"}, {}, {}};
  const std::string base = fmt::format("{}/lmcore-bench-codegen-{}", std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp", ::getpid());
  std::error_code ec;
  codegen::ModelShapes shapes;  // the trainer's default model
  // Every source `lmcore codegen warm` compiles for it with tuning: the norms and each GEMM's candidates.
  std::vector<codegen::GeneratedSource> sources, model;  // model: one kernel per spec, as a run loads them
  for (const auto& s : codegen::model_rmsnorm_specs(shapes)) {
    sources.push_back(codegen::generate_rmsnorm(s, codegen::default_rmsnorm_variant()));
    model.push_back(sources.back());
  }
  for (const auto& s : codegen::model_gemm_specs(shapes)) {
    for (const auto& v : codegen::gemm_candidates(s)) sources.push_back(codegen::generate_gemm(s, v));
    model.push_back(sources.back());
  }
  // Cold compile of each kind, one at a time.
  for (std::size_t i : {std::size_t{0}, std::size_t{2}, sources.size() - 1}) {
    co.cache_dir = base + "/one-" + std::to_string(i);
    co.workers = 1;
    const double s = in_child([&] {
      const auto t0 = Clock::now();
      const auto l = codegen::load_kernel(sources[i], co);
      return l.handle && l.compiled ? since(t0) : -1.0;
    });
    t.rows.push_back({"cold compile + load: " + sources[i].spec + " " + sources[i].variant, 1, 1, s, s * 1e3});
  }
  for (int w : {1, all}) {
    co.cache_dir = base + "/all-" + std::to_string(w);
    co.workers = w;
    const double s = in_child([&] {
      const auto t0 = Clock::now();
      const auto l = codegen::load_kernels(sources, co);
      for (const auto& k : l)
        if (!k.handle) return -1.0;
      return since(t0);
    });
    t.rows.push_back({"default model, every tuning candidate", static_cast<double>(sources.size()), w, s,
                      s * 1e3 / static_cast<double>(sources.size())});
  }
  // Warm: a fresh process loads the model's kernels (compiler identification, a checksum and a dlopen each).
  co.cache_dir = base + "/all-" + std::to_string(all);
  const double warm = in_child([&] {
    const auto t0 = Clock::now();
    const auto l = codegen::load_kernels(model, co);
    for (const auto& k : l)
      if (!k.handle || k.compiled) return -1.0;
    return since(t0);
  });
  t.rows.push_back({"warm load from the cache (new process)", static_cast<double>(model.size()), 0, warm,
                    warm * 1e3 / static_cast<double>(model.size())});
  std::filesystem::remove_all(base, ec);
  std::string why;
  const auto cc = codegen::detail::cached_compiler(co, &why);
  t.notes.push_back(cc ? fmt::format("compiler {} ({}), flags {}", cc->path, cc->version, cc->flags_string()) : why);
  t.notes.push_back(fmt::format("load average {:.1f}", load_average_1min()));
  return t;
}

BenchTable train_table(const BenchOptions& opt) {
  model::ModelConfig cfg;  // the trainer's default model
  cfg.vocab_size = 4096;
  const std::int64_t B = 8, T = 256;
  BenchTable t{fmt::format("codegen: default model forward + backward, B {} x T {}, f32, {} threads", B, T, num_threads()),
               {"path", "ms / step", "tokens/s", "speed-up"},
               {},
               {}};
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T)), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 131 + 7) % 4096);
    targets[i] = static_cast<std::int32_t>((i * 71 + 3) % 4096);
  }
  model::Llama off(cfg, {.batch = B, .seq_len = T}), on(cfg, {.batch = B, .seq_len = T, .codegen = true});
  off.init_weights(1);
  on.init_weights(1);
  // Alternating steps, best of each: both see the same disturbances.
  const int steps = opt.quick ? 3 : 8;
  double best_off = INFINITY, best_on = INFINITY;
  off.forward_backward(tokens.data(), targets.data(), 1.0f);
  on.forward_backward(tokens.data(), targets.data(), 1.0f);
  for (int s = 0; s < steps; ++s) {
    auto t0 = Clock::now();
    off.forward_backward(tokens.data(), targets.data(), 1.0f);
    best_off = std::min(best_off, since(t0));
    t0 = Clock::now();
    on.forward_backward(tokens.data(), targets.data(), 1.0f);
    best_on = std::min(best_on, since(t0));
  }
  const double tok = static_cast<double>(B * T);
  t.rows.push_back({"regular (--codegen off)", best_off * 1e3, tok / best_off, 1.0});
  t.rows.push_back({"generated kernels (--codegen on)", best_on * 1e3, tok / best_on, best_off / best_on});
  t.notes.push_back(fmt::format("best of {} alternating steps each (model forward_backward, no optimizer); load "
                                "average {:.1f}",
                                steps, load_average_1min()));
  return t;
}

}  // namespace

std::vector<BenchTable> run_codegen_suite(const BenchOptions& options) {
  const codegen::Options co = codegen::Options::from_env();
  std::vector<BenchTable> tables;
  if (section_wanted(options, "rmsnorm")) tables.push_back(rmsnorm_table(options, co));
  if (section_wanted(options, "gemm")) tables.push_back(gemm_table(options, co));
  if (section_wanted(options, "compile")) tables.push_back(compile_table(options, co));
  if (section_wanted(options, "train")) tables.push_back(train_table(options));
  return tables;
}

}  // namespace lmcore::bench
