// lmcore bench core — the tensor core's kernels: sgemm GFLOPS (the yardstick other suites quote),
// the casts that mixed precision leans on, reductions, sort and the embedding gradient.
#include <algorithm>
#include <vector>

#include "bench/random_fill.h"
#include "bench/suites/bench_suite.h"
#include "lmcore/core/copy.h"
#include "lmcore/core/embedding.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/core/reduce.h"
#include "lmcore/core/sort.h"

namespace lmcore::bench {

// bench/suites/core_gemm_lowp.cpp
std::vector<BenchTable> run_core_gemm_lowp(const BenchOptions& options);

std::vector<BenchTable> run_core_suite(const BenchOptions& options) {
  // Both f32 paths on the same operands, best of alternating rounds: the measurement behind
  // f32_gemm_path()'s rule, repeated on whatever CPU this runs on.
  BenchTable gemm{"core: sgemm (matmul f32), OpenBLAS vs oneDNN",
                  {"M", "N", "K", "ms", "GFLOPS", "OpenBLAS GFLOPS", "oneDNN GFLOPS", "oneDNN / OpenBLAS"}, {}, {}};
  const std::vector<std::int64_t> sizes = options.quick ? std::vector<std::int64_t>{512}
                                                        : std::vector<std::int64_t>{256, 512, 1024, 2048};
  const double gemm_budget = options.quick ? 0.2 : 0.5;
  for (std::int64_t n : sizes) {
    Tensor a = random_uniform({n, n}, 1), b = random_uniform({n, n}, 2);
    double best[2] = {1e30, 1e30}, taken = 1e30;
    for (int round = 0; round < 3; ++round) {
      for (F32GemmPath path : {F32GemmPath::openblas, F32GemmPath::onednn}) {
        set_f32_gemm_path(path);
        double& b_path = best[static_cast<int>(path)];
        b_path = std::min(b_path, time_best([&] { (void)matmul(a, b); }, gemm_budget));
      }
      set_f32_gemm_path(std::nullopt);
      taken = std::min(taken, time_best([&] { (void)matmul(a, b); }, gemm_budget));
    }
    const double flop = 2.0 * n * n * n;
    gemm.rows.push_back({n, n, n, taken * 1e3, flop / taken / 1e9, flop / best[0] / 1e9, flop / best[1] / 1e9,
                         best[0] / best[1]});
  }
  gemm.notes.push_back(fmt::format("ms, GFLOPS: the path gemm_f32 takes here: {}", f32_gemm_path_description()));
  gemm.notes.push_back(fmt::format("threads {}; best of 3 alternating rounds", num_threads()));

  BenchTable cast{"core: casts, contiguous", {"op", "elements", "ms", "GB/s (in+out)"}, {}, {}};
  const std::int64_t n = options.quick ? (1 << 22) : (1 << 24);
  Tensor x = random_uniform({n}, 3);
  Tensor xb = x.to(DType::bf16), xh = x.to(DType::f16);
  struct Case { const char* name; Tensor src; DType to; };
  for (const Case& c : {Case{"f32->bf16", x, DType::bf16}, Case{"bf16->f32", xb, DType::f32},
                        Case{"f32->f16", x, DType::f16}, Case{"f16->f32", xh, DType::f32}}) {
    Tensor dst = Tensor::empty(c.src.shape(), c.to);
    const double s = time_median([&] { copy_cast(c.src, dst); }, 5);
    const double bytes = static_cast<double>(c.src.nbytes() + dst.nbytes());
    cast.rows.push_back({c.name, n, s * 1e3, bytes / s / 1e9});
  }
  cast.notes.push_back(fmt::format("lmcore threads: {}", num_threads()));

  // Reductions: rows (the vector kernels), columns (bias-gradient shape) and everything.
  BenchTable red{"core: sum", {"input", "dims", "ms", "GB/s (in)"}, {}, {}};
  const std::int64_t rows = options.quick ? 256 : 1024, cols = 16384;
  const Tensor m = random_uniform({rows, cols}, 4), mb = m.to(DType::bf16);
  struct RedCase { std::string name; Tensor x; Shape dims; };
  for (const RedCase& c : {RedCase{"f32 [" + std::to_string(rows) + ", 16384]", m, {-1}},
                           RedCase{"bf16 [" + std::to_string(rows) + ", 16384]", mb, {-1}},
                           RedCase{"f32 [" + std::to_string(rows) + ", 16384]", m, {0}},
                           RedCase{"f32 [" + std::to_string(n) + "]", x, {}}}) {
    const double s = time_median([&] { (void)sum(c.x, c.dims); }, options.quick ? 5 : 11);
    red.rows.push_back({c.name, c.dims.empty() ? std::string("all") : std::to_string(c.dims[0]), s * 1e3,
                        static_cast<double>(c.x.nbytes()) / s / 1e9});
  }

  BenchTable srt{"core: sort along the last dim (radix, stable)", {"input", "ms", "Melem/s"}, {}, {}};
  const std::int64_t srows = options.quick ? 8 : 64;
  const Tensor sx = random_uniform({srows, 65536}, 5);
  const Tensor si = sx.to(DType::i32);
  for (const auto& [name, t] : {std::pair<std::string, Tensor>{"f32", sx}, {"i32", si}}) {
    const double s = time_median([&] { (void)sort(t, -1); }, options.quick ? 3 : 7);
    srt.rows.push_back({name + " [" + std::to_string(srows) + ", 65536]", s * 1e3, static_cast<double>(t.numel()) / s / 1e6});
  }
  const double stk = time_median([&] { (void)topk(sx, 50, -1); }, options.quick ? 3 : 7);
  srt.rows.push_back({"topk k=50 f32 [" + std::to_string(srows) + ", 65536]", stk * 1e3,
                      static_cast<double>(sx.numel()) / stk / 1e6});

  BenchTable emb{"core: embedding backward (dense, deterministic)", {"grad", "ids", "V x D", "ms", "GB/s (grad in + out)"}, {}, {}};
  const std::int64_t V = 50257, D = 768, tokens = options.quick ? 2048 : 8192;
  Tensor ids = Tensor::empty({tokens}, DType::i64);
  {
    std::uint32_t state = 12345;
    for (std::int64_t i = 0; i < tokens; ++i) {
      state = state * 1664525u + 1013904223u;
      ids.data<std::int64_t>()[i] = static_cast<std::int64_t>(state % static_cast<std::uint32_t>(V));
    }
  }
  const Tensor g = random_uniform({tokens, D}, 6);
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor gd = g.to(dt);
    const double s = time_median([&] { (void)embedding_backward(gd, ids, V); }, options.quick ? 3 : 7);
    const double bytes = static_cast<double>(gd.nbytes()) + static_cast<double>(V * D) * static_cast<double>(gd.itemsize());
    emb.rows.push_back({std::string(dtype_name(dt)), tokens, std::to_string(V) + " x " + std::to_string(D), s * 1e3,
                        bytes / s / 1e9});
  }
  emb.notes.push_back("the output [V, D] is written in full (zero rows included), as torch's dense gradient");
  std::vector<BenchTable> tables{gemm};
  for (BenchTable& t : run_core_gemm_lowp(options)) tables.push_back(std::move(t));
  for (BenchTable* t : {&cast, &red, &srt, &emb}) tables.push_back(std::move(*t));
  return tables;
}

}  // namespace lmcore::bench
