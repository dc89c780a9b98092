// lmcore codegen list|warm|clear — the cache of generated kernels: what is in it, compiling (and tuning)
// every kernel a model needs ahead of a run, and emptying it.
#include <ctime>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/compiler.h"
#include "lmcore/codegen/model_kernels.h"
#include "lmcore/codegen/runtime.h"
#include "lmcore/core/error.h"
#include "lmcore/core/progress.h"
#include "lmcore/core/runtime_info.h"
#include "lmcore/model/config.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

namespace {

std::string human_bytes(std::uint64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < (1u << 20)) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.1f} MiB", b / 1048576.0);
}

std::string local_time(std::int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

int list(const codegen::Options& o) {
  codegen::KernelCache cache(o.cache_dir, o.cache_max_bytes);
  const auto entries = cache.list();
  std::uint64_t total = 0;
  std::printf("%s: %zu kernels\n", o.cache_dir.c_str(), entries.size());
  if (!entries.empty())
    std::printf("%-12s  %-8s  %-56s  %-10s  %10s  %-19s  %s\n", "key", "kind", "shape", "variant", "size", "last use",
                "state");
  for (const auto& e : entries) {
    total += e.bytes;
    std::printf("%-12s  %-8s  %-56s  %-10s  %10s  %-19s  %s\n", e.key.substr(0, 12).c_str(), e.kind.c_str(),
                e.spec.c_str(), e.variant.c_str(), human_bytes(e.bytes).c_str(), local_time(e.last_use).c_str(),
                e.valid ? "ok" : "CORRUPT (rebuilt on next use)");
  }
  std::printf("total %s of %s (LMCORE_CACHE_MAX_MB)\n", human_bytes(total).c_str(),
              human_bytes(o.cache_max_bytes).c_str());
  return 0;
}

int warm(const codegen::Options& o, const std::string& config, std::int64_t batch, std::int64_t seq,
         const std::string& dtype, bool quiet) {
  const model::ModelConfig mc = config.empty() ? model::ModelConfig{} : model::ModelConfig::from_file(config);
  mc.validate();
  codegen::ModelShapes shapes;
  shapes.dim = mc.dim;
  shapes.ffn_dim = mc.ffn_dim;
  shapes.q_dim = mc.q_dim();
  shapes.qkv_dim = mc.q_dim() + 2 * mc.kv_dim();
  if (__builtin_mul_overflow(batch, seq, &shapes.tokens)) {
    std::fprintf(stderr, "lmcore codegen warm: --batch-size %lld x --seq-len %lld tokens overflows 64 bits\n",
                 static_cast<long long>(batch), static_cast<long long>(seq));
    return kUsageError;
  }
  // The trainer refuses a batch whose activations cannot fit; kernels for one are never used. The
  // widest product's f32 output alone (tokens x 2 ffn_dim) is the floor checked here.
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double output_bytes = static_cast<double>(shapes.tokens) * 2.0 * static_cast<double>(mc.ffn_dim) * 4.0;
  if (const std::uint64_t memory = physical_memory_bytes(); memory != 0 && output_bytes > static_cast<double>(memory)) {
    std::fprintf(stderr,
                 "lmcore codegen warm: --batch-size %lld x --seq-len %lld (%lld tokens): the gate/up product's output "
                 "alone needs %.1f GiB, more than this machine's %.1f GiB of memory\n",
                 static_cast<long long>(batch), static_cast<long long>(seq), static_cast<long long>(shapes.tokens),
                 output_bytes / gib, static_cast<double>(memory) / gib);
    return kUsageError;
  }
  std::string why;
  const auto cc = codegen::find_compiler(o, &why);
  if (!cc) {
    std::fprintf(stderr, "lmcore codegen warm: %s\n", why.c_str());
    return 1;
  }
  shapes.eps = static_cast<float>(mc.norm_eps);
  shapes.dtype = dtype == "bf16" ? codegen::DType::bf16 : codegen::DType::f32;
  std::printf("compiler: %s (%s), %d workers, cache %s\n", cc->path.c_str(), cc->version.c_str(), o.workers,
              o.cache_dir.c_str());
  const auto sources = codegen::model_kernel_sources(shapes, o);
  Progress progress("codegen warm", static_cast<std::int64_t>(sources.size()), "kernels", quiet ? nullptr : stderr);
  const auto loaded = codegen::load_kernels(sources, o, [&](std::size_t done, std::size_t) {
    if (!quiet) progress.update(static_cast<std::int64_t>(done));
  });
  if (!quiet) progress.finish();
  int failed = 0, compiled = 0;
  double compile_seconds = 0;
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    const auto& l = loaded[i];
    if (!l.handle) {
      ++failed;
      std::fprintf(stderr, "  FAILED %s: %s\n", sources[i].spec.c_str(), l.why.c_str());
      continue;
    }
    if (l.compiled) ++compiled;
    compile_seconds += l.compile_seconds;
    std::printf("  %-8s %-56s %-10s %s\n", sources[i].kind.c_str(), sources[i].spec.c_str(), sources[i].variant.c_str(),
                l.compiled ? fmt::format("compiled in {:.2f} s", l.compile_seconds).c_str() : "cached");
  }
  std::printf("%zu kernels for dim %lld, ffn_dim %lld, %lld tokens, %s: %d compiled (%.1f s of compiler time), %zu "
              "cached, %d failed, %.1f s\n",
              sources.size(), static_cast<long long>(shapes.dim), static_cast<long long>(shapes.ffn_dim),
              static_cast<long long>(shapes.tokens), dtype.c_str(), compiled, compile_seconds,
              loaded.size() - static_cast<std::size_t>(compiled + failed), failed, progress.elapsed());
  return failed ? 1 : 0;
}

}  // namespace

int run_codegen(int argc, char** argv) {
  CLI::App app{"Generated CPU kernels: the cache (LMCORE_CACHE_DIR), compiling a model's kernels ahead of a run.",
               "lmcore codegen"};
  app.require_subcommand(1);
  codegen::Options o = codegen::Options::from_env();
  auto add_cache = [&](CLI::App* sub) {
    sub->add_option("--cache-dir", o.cache_dir, "kernel cache directory (LMCORE_CACHE_DIR)")->capture_default_str();
  };
  CLI::App* list_cmd = app.add_subcommand("list", "cached kernels: kind, shape, variant, size, last use");
  add_cache(list_cmd);

  CLI::App* warm_cmd =
      app.add_subcommand("warm", "compile (and tune) every kernel a model needs, in parallel, with a progress bar");
  add_cache(warm_cmd);
  std::string config, dtype = "f32";
  std::int64_t batch = 8, seq = 256;
  bool quiet = false;
  warm_cmd->add_option("--config", config, "model config.json (empty: the trainer's built-in default model)")
      ->capture_default_str();
  warm_cmd->add_option("--batch-size", batch, "sequences per micro-batch (the GEMMs' rows are batch x seq)")
      ->check(cli::positive())
      ->capture_default_str();
  warm_cmd->add_option("--seq-len", seq, "tokens per sequence")->check(cli::positive())->capture_default_str();
  warm_cmd->add_option("--dtype", dtype, "activation dtype: f32 | bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  warm_cmd->add_option("--workers", o.workers, "parallel compiles (LMCORE_COMPILE_WORKERS; default the core count)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  warm_cmd->add_option("--compiler", o.compiler, "C++ compiler (LMCORE_CXX; empty: c++ on PATH)")->capture_default_str();
  warm_cmd->add_flag("--quiet", quiet, "no progress bar");

  CLI::App* clear_cmd = app.add_subcommand("clear", "remove every cached kernel and tuning result");
  add_cache(clear_cmd);

  LMCORE_PARSE_ARGS(app, argc, argv);
  try {
    if (list_cmd->parsed()) return list(o);
    if (warm_cmd->parsed()) return warm(o, config, batch, seq, dtype, quiet);
    codegen::KernelCache cache(o.cache_dir, o.cache_max_bytes);
    const std::uint64_t freed = cache.clear();
    std::printf("cleared %s: %s freed\n", o.cache_dir.c_str(), human_bytes(freed).c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "lmcore codegen: %s\n", e.what());
    return 1;
  }
}

}  // namespace lmcore::cli
