// `lmcore bench attention`, bf16 rows: flex attention with bf16 inputs (Q K^T and P V on the matrix
// units through gemm_lowp, softmax in f32) against the same problem in f32, forward and backward, in
// alternating rounds of the same run (B = 1, H = 8, D = 64, blocks 128 x 128). The target: the
// bf16 forward at least 2x the f32 forward on a CPU with AMX.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/random_fill.h"
#include "bench/suites/bench_suite.h"
#include "lmcore/attention/flex_attention.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/parallel.h"

namespace lmcore::bench {

using namespace lmcore::attention;

std::vector<BenchTable> run_attention_bf16(const BenchOptions& options) {
  struct Row {
    std::int64_t L;
    std::string name;
    MaskMod mask;
  };
  std::vector<Row> rows;
  if (options.quick) {
    rows = {{2048, "causal", MaskMod::causal()}};
  } else {
    rows = {{8192, "window 256", MaskMod::sliding_window(256)},
            {8192, "window 1024", MaskMod::sliding_window(1024)},
            {8192, "causal", MaskMod::causal()}};
  }
  const std::int64_t B = 1, H = 8, D = 64;
  const int rounds = options.quick ? 1 : 3;
  BenchTable t{"attention: flex bf16 (matrix units) vs flex f32, same masks, same run (B=1, H=8, D=64)",
               {"L", "mask", "f32 fwd ms", "bf16 fwd ms", "fwd bf16 speedup", "f32 bwd ms", "bf16 bwd ms",
                "bwd bf16 speedup", "bf16 fwd GFLOPS", "bf16 bwd GFLOPS"},
               {},
               {}};
  for (const Row& row : rows) {
    const std::int64_t L = row.L;
    const Tensor q = random_uniform({B, H, L, D}, 21), k = random_uniform({B, H, L, D}, 22);
    const Tensor v = random_uniform({B, H, L, D}, 23), g = random_uniform({B, H, L, D}, 24);
    const Tensor qb = q.to(DType::bf16), kb = k.to(DType::bf16), vb = v.to(DType::bf16), gb = g.to(DType::bf16);
    const BlockMask bm = create_block_mask(row.mask, B, H, L, L);
    const FlexFlops fl = flex_flops(bm, B, H, D, D);
    FlexOptions opt;
    opt.block_mask = &bm;
    opt.return_lse = true;
    FlexResult r32, r16;
    double f32_fwd = 1e30, f32_bwd = 1e30, bf_fwd = 1e30, bf_bwd = 1e30;
    const double budget = options.quick ? 0.2 : 1.0;
    for (int round = 0; round < rounds; ++round) {
      f32_fwd = std::min(f32_fwd, time_best([&] { r32 = flex_attention(q, k, v, opt); }, budget));
      bf_fwd = std::min(bf_fwd, time_best([&] { r16 = flex_attention(qb, kb, vb, opt); }, budget));
      f32_bwd = std::min(f32_bwd, time_best([&] { (void)flex_attention_backward(q, k, v, r32.out, r32.lse, g, opt); }, budget));
      bf_bwd = std::min(bf_bwd, time_best([&] { (void)flex_attention_backward(qb, kb, vb, r16.out, r16.lse, gb, opt); }, budget));
    }
    t.rows.push_back({L, row.name, f32_fwd * 1e3, bf_fwd * 1e3, f32_fwd / bf_fwd, f32_bwd * 1e3, bf_bwd * 1e3,
                      f32_bwd / bf_bwd, fl.forward / bf_fwd / 1e9, fl.backward / bf_bwd / 1e9});
  }
  t.notes.push_back(fmt::format("bf16 GEMM: {}; oneDNN {}", lowp_gemm_path_description(DType::bf16), onednn_info()));
  t.notes.push_back(fmt::format("threads {}; best of {} alternating rounds of back-to-back calls; load average {:.1f} "
                                "at the end; speedup = f32 time / bf16 time",
                                num_threads(), rounds, load_average_1min()));
  return {t};
}

}  // namespace lmcore::bench
