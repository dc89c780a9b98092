// `lmcore bench core`, low-precision GEMM rows: gemm_lowp (oneDNN on the matrix units) in bf16 and f16
// beside torch 1.13's bf16 matmul (bench/torch_gemm.py) measured in the same run. Shapes: a square
// 2048^3, the fused linear cross-entropy's tile products (N = 4096 tokens, H = 1024, vocabulary chunks
// of 4096) and the flex attention tile products (128-row blocks, head dim 64).
//
// Both sides produce a C in the input dtype (torch's bf16 matmul does), from operands laid out the
// same way (a transposed operand is a transposed view in torch, trans_a/trans_b here). The rounds
// alternate lmcore and torch so that both see the same machine load; each figure is the best over
// rounds of the best sample of back-to-back calls.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/random_fill.h"
#include "bench/suites/bench_suite.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/parallel.h"

namespace lmcore::bench {

namespace {

struct GemmShape {
  const char* name;
  std::int64_t m, n, k;
  bool ta, tb;
};

struct Operands {
  Tensor a, b, c;
};

Operands make_operands(const GemmShape& s, DType dt, std::uint32_t seed) {
  Tensor a = random_uniform(s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, seed, 2.0f, dt);
  Tensor b = random_uniform(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, seed + 1, 2.0f, dt);
  return {a, b, Tensor::empty({s.m, s.n}, dt)};
}

double time_gemm(const GemmShape& s, const Operands& o, double budget) {
  const DType dt = o.a.dtype();
  return time_best(
      [&] {
        gemm_lowp(dt, dt, s.ta, s.tb, s.m, s.n, s.k, 1.0f, o.a.data_ptr(), o.a.size(1), o.b.data_ptr(), o.b.size(1), 0.0f,
                  o.c.data_ptr(), s.n);
      },
      budget);
}

}  // namespace

std::vector<BenchTable> run_core_gemm_lowp(const BenchOptions& options) {
  std::vector<GemmShape> shapes = {
      {"square", 2048, 2048, 2048, false, false},
      {"lce logits = h W^T", 256, 4096, 1024, false, true},
      {"lce d_h = dlogits W", 256, 1024, 4096, false, false},
      {"lce d_W = dlogits^T h", 4096, 1024, 256, true, false},
      {"attn S = Q K^T", 128, 128, 64, false, true},
      {"attn O = P V", 128, 64, 128, false, false},
      {"attn dK = dS^T Q", 128, 64, 128, true, false},
  };
  if (options.quick) shapes = {{"square", 1024, 1024, 1024, false, false}, {"attn S = Q K^T", 128, 128, 64, false, true}};
  const int rounds = options.quick ? 1 : 3;
  const double budget = options.quick ? 0.2 : 0.5;
  const int threads = num_threads();

  std::vector<Operands> bf(shapes.size()), hf(shapes.size());
  std::string torch_args = fmt::format("--threads {} --dtype bf16 --budget {} --shapes", threads, budget);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    bf[i] = make_operands(shapes[i], DType::bf16, static_cast<std::uint32_t>(10 + 2 * i));
    hf[i] = make_operands(shapes[i], DType::f16, static_cast<std::uint32_t>(10 + 2 * i));
    const GemmShape& s = shapes[i];
    torch_args += fmt::format(" {},{},{},{},{}", s.m, s.n, s.k, int(s.ta), int(s.tb));
  }
  const double inf = 1e30;
  std::vector<double> t_lm(shapes.size(), inf), t_wide(shapes.size(), inf), t_h(shapes.size(), inf),
      t_torch(shapes.size(), inf);
  std::string torch_error, torch_version = "(not run)";
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      t_lm[i] = std::min(t_lm[i], time_gemm(shapes[i], bf[i], budget));
      set_lowp_gemm_onednn(false);
      t_wide[i] = std::min(t_wide[i], time_gemm(shapes[i], bf[i], budget));
      set_lowp_gemm_onednn(true);
      t_h[i] = std::min(t_h[i], time_gemm(shapes[i], hf[i], budget));
    }
    try {
      const nlohmann::json j = run_python_peer("torch_gemm.py", torch_args);
      for (std::size_t i = 0; i < shapes.size(); ++i) t_torch[i] = std::min(t_torch[i], j["seconds"][i].get<double>());
      torch_version = j.value("torch", std::string("?"));
    } catch (const std::exception& e) {
      torch_error = e.what();
    }
  }

  // The peer is whatever torch /usr/bin/python3 imports (1.13 on Debian 12): the title names the one that ran.
  BenchTable t{fmt::format("core: bf16/f16 GEMM (gemm_lowp) vs torch {} bf16 matmul, same run, C in the input dtype",
                           torch_version),
               {"shape", "M", "N", "K", "op", "bf16 GFLOPS", "torch bf16 GFLOPS", "bf16 / torch", "bf16 widened GFLOPS",
                "f16 GFLOPS"},
               {},
               {}};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const GemmShape& s = shapes[i];
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const std::string op = fmt::format("{}{}", s.ta ? "A^T" : "A", s.tb ? " B^T" : " B");
    const nlohmann::json torch_gflops = t_torch[i] < inf ? nlohmann::json(flop / t_torch[i] / 1e9) : nlohmann::json("n/a");
    const nlohmann::json ratio = t_torch[i] < inf ? nlohmann::json(t_torch[i] / t_lm[i]) : nlohmann::json("n/a");
    t.rows.push_back({s.name, s.m, s.n, s.k, op, flop / t_lm[i] / 1e9, torch_gflops, ratio, flop / t_wide[i] / 1e9,
                      flop / t_h[i] / 1e9});
  }
  t.notes.push_back(fmt::format("oneDNN {}; bf16: {}", onednn_info(), lowp_gemm_path_description(DType::bf16)));
  t.notes.push_back(fmt::format("f16: {}; torch not timed in f16 (1.13 has no f16 CPU matmul)",
                                lowp_gemm_path_description(DType::f16)));
  t.notes.push_back(fmt::format("threads {} (lmcore and torch.set_num_threads); best of {} alternating rounds; "
                                "bf16 / torch > 1: lmcore faster; load average {:.1f} at the end",
                                threads, rounds, load_average_1min()));
  if (!torch_error.empty()) t.notes.push_back("torch: " + torch_error);
  return {t};
}

}  // namespace lmcore::bench
