// lmcore bench attention — flex attention against the dense flash-style sdpa on the same masked
// problem (B = 1, H = 8, D = 64, f32), forward and backward, with GFLOPS on the blocks flex computes
// as a share of the sgemm GFLOPS measured in the same run; and the cost of building a causal block
// mask at L = S = 1,048,576.
//
// The dense baseline gets the mask as an explicit [L, S] bool tensor (every tile computed and masked),
// except for the causal row, where it runs causal = true (lower-triangle tiles only, as a causal flash
// kernel does). Its work does not depend on the mask's content, so at each L it is timed once, on the
// first masked row, and that time is quoted for the other masked rows of the same L.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "bench/random_fill.h"
#include "bench/suites/bench_suite.h"
#include "lmcore/attention/flex_attention.h"
#include "lmcore/attention/sdpa.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"

namespace lmcore::bench {

namespace {

using namespace lmcore::attention;

// The dense [L, S] bool mask of a MaskMod (1 byte per element; 1 GiB at L = S = 32768).
Tensor dense_mask(const MaskMod& m, std::int64_t L, std::int64_t S) {
  Tensor t = Tensor::empty({L, S}, DType::boolean);
  auto* p = static_cast<std::uint8_t*>(t.data_ptr());
  parallel_for(0, L, 64, [&](std::int64_t lo, std::int64_t hi) { m.fill(0, 0, lo, hi - lo, 0, S, p + lo * S, S); });
  return t;
}

double sgemm_gflops() {
  const std::int64_t n = 2048;
  Tensor a = random_uniform({n, n}, 1), b = random_uniform({n, n}, 2);
  const double s = time_median([&] { (void)matmul(a, b); }, 5, 5.0);
  return 2.0 * n * n * n / s / 1e9;
}

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

struct Row {
  std::int64_t L;
  std::string name;
  MaskMod mask;
  bool causal_baseline = false;
  std::int64_t q_block = 128, kv_block = 128;
};

std::vector<std::int64_t> documents(std::int64_t n, std::uint32_t seed) {
  // Packed documents of random lengths 64 .. 2048 (mean ~1 k), as in a packed pre-training batch.
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> len(64, 2048);
  std::vector<std::int64_t> ids;
  std::int64_t doc = 0;
  while (static_cast<std::int64_t>(ids.size()) < n) {
    const std::int64_t l = len(gen);
    for (std::int64_t i = 0; i < l && static_cast<std::int64_t>(ids.size()) < n; ++i) ids.push_back(doc);
    ++doc;
  }
  return ids;
}

}  // namespace

// bench/suites/attention_bf16.cpp
std::vector<BenchTable> run_attention_bf16(const BenchOptions& options);

namespace {

// The f32 flex rows against dense sdpa: forward, backward, and the dense baseline's own GFLOPS.
struct FlexTables {
  BenchTable fwd, bwd, dense;
};

FlexTables flex_vs_dense_tables(const BenchOptions& options) {
  const std::int64_t B = 1, H = 8, D = 64;
  std::vector<Row> rows;
  if (options.quick) {
    // A few seconds: L = 2048, where the dense baseline is cheap.
    rows = {{2048, "window 64", MaskMod::sliding_window(64)}, {2048, "causal", MaskMod::causal(), true}};
  } else {
    for (std::int64_t w : {64, 256, 1024, 4096})
      rows.push_back({8192, fmt::format("window {}", w), MaskMod::sliding_window(w)});
    // The same window with narrower key blocks: less of each diagonal block is masked away.
    rows.push_back({8192, "window 64", MaskMod::sliding_window(64), false, 128, 64});
    rows.push_back({8192, "causal", MaskMod::causal(), true});
    rows.push_back({8192, "document", MaskMod::document(documents(8192, 5)) & MaskMod::causal()});
    rows.push_back({16384, "window 256", MaskMod::sliding_window(256)});
    rows.push_back({32768, "window 256", MaskMod::sliding_window(256)});
    rows.push_back({32768, "window 1024", MaskMod::sliding_window(1024)});
  }

  // sgemm is measured before and after the rows and the higher figure is the reference, so a slow
  // moment (the 2-core box is shared) during one of them cannot inflate the % sgemm columns.
  const double sgemm_before = sgemm_gflops();
  BenchTable fwd{"attention: flex vs dense sdpa, forward (B=1, H=8, D=64, f32)",
                 {"L", "mask", "blocks", "elem density", "block density", "dense ms", "flex ms", "speedup",
                  "flex GFLOPS", "% sgemm"},
                 {},
                 {}};
  BenchTable bwd{"attention: flex vs dense sdpa, backward (dq, dk, dv)",
                 {"L", "mask", "blocks", "elem density", "block density", "dense ms", "flex ms", "speedup",
                  "flex GFLOPS", "% sgemm"},
                 {},
                 {}};
  BenchTable dense_tab{"attention: dense sdpa GFLOPS (all computed tiles) vs sgemm",
                       {"L", "baseline", "fwd ms", "fwd GFLOPS", "bwd ms", "bwd GFLOPS", "sgemm GFLOPS"},
                       {},
                       {}};
  std::map<std::int64_t, std::pair<double, double>> dense_masked;  // L -> (fwd s, bwd s)
  const int reps = options.quick ? 2 : 3;
  const int dense_reps = options.quick ? 1 : reps;
  for (const Row& row : rows) {
    const std::int64_t L = row.L;
    const Tensor q = random_uniform({B, H, L, D}, 11), k = random_uniform({B, H, L, D}, 12), v = random_uniform({B, H, L, D}, 13);
    const Tensor g = random_uniform({B, H, L, D}, 14);
    const BlockMask bm = create_block_mask(row.mask, B, H, L, L, row.q_block, row.kv_block);
    const FlexFlops fl = flex_flops(bm, B, H, D, D);
    FlexOptions opt;
    opt.block_mask = &bm;
    opt.return_lse = true;
    FlexResult r;
    const double t_fwd = time_median([&] { r = flex_attention(q, k, v, opt); }, reps, 20.0);
    const double t_bwd = time_median([&] { (void)flex_attention_backward(q, k, v, r.out, r.lse, g, opt); }, reps, 20.0);

    double d_fwd = 0, d_bwd = 0;
    std::string baseline;
    if (row.causal_baseline || !dense_masked.count(L)) {
      SdpaOptions so;
      Tensor mask_t;
      if (row.causal_baseline) {
        so.causal = true;
        baseline = "sdpa causal";
      } else {
        mask_t = dense_mask(row.mask, L, L);
        so.attn_mask = mask_t;
        baseline = "sdpa + [L,S] mask";
      }
      // At L >= 16384 a dense pass takes tens of seconds: one timed run, no warm-up (the flex runs
      // before it have started the thread pool and touched q, k, v already).
      SdpaResult dr;
      if (L >= 16384) {
        d_fwd = seconds_of([&] { dr = sdpa(q, k, v, so); });
        d_bwd = seconds_of([&] { (void)sdpa_backward(q, k, v, dr.out, dr.lse, g, so); });
      } else {
        d_fwd = time_median([&] { dr = sdpa(q, k, v, so); }, dense_reps, 30.0);
        d_bwd = time_median([&] { (void)sdpa_backward(q, k, v, dr.out, dr.lse, g, so); }, dense_reps, 30.0);
      }
      // Dense flops: every tile for the explicit mask; the lower triangle of tiles for causal.
      const BlockMask dense_bm = row.causal_baseline ? create_block_mask(MaskMod::causal(), 1, 1, L, L)
                                                     : full_block_mask(L, L);
      const FlexFlops dfl = flex_flops(dense_bm, B, H, D, D);
      dense_tab.rows.push_back({L, baseline, d_fwd * 1e3, dfl.forward / d_fwd / 1e9, d_bwd * 1e3,
                                dfl.backward / d_bwd / 1e9, 0.0});  // sgemm: set after the rows
      if (!row.causal_baseline) dense_masked[L] = {d_fwd, d_bwd};
    } else {
      std::tie(d_fwd, d_bwd) = dense_masked[L];
    }
    const double elem = bm.element_density(), blk = bm.block_density();
    const double gf_fwd = fl.forward / t_fwd / 1e9, gf_bwd = fl.backward / t_bwd / 1e9;
    const std::string blocks = fmt::format("{}x{}", row.q_block, row.kv_block);
    // The last column (% sgemm) is set after the rows, from GFLOPS in the column before it.
    fwd.rows.push_back({L, row.name, blocks, elem, blk, d_fwd * 1e3, t_fwd * 1e3, d_fwd / t_fwd, gf_fwd, 0.0});
    bwd.rows.push_back({L, row.name, blocks, elem, blk, d_bwd * 1e3, t_bwd * 1e3, d_bwd / t_bwd, gf_bwd, 0.0});
  }
  const double sgemm_after = sgemm_gflops();
  const double sgemm = std::max(sgemm_before, sgemm_after);
  for (BenchTable* t : {&fwd, &bwd})
    for (auto& r : t->rows) r.back() = 100.0 * r[r.size() - 2].get<double>() / sgemm;
  for (auto& r : dense_tab.rows) r.back() = sgemm;
  const std::string common = fmt::format(
      "sgemm (OpenBLAS, 2048^3, all cores) in this run: {:.1f} GFLOPS before the rows, {:.1f} after; % sgemm uses "
      "the higher; lmcore threads: {}; dense baseline blocks 128x128",
      sgemm_before, sgemm_after, num_threads());
  for (BenchTable* t : {&fwd, &bwd}) {
    t->notes.push_back(common);
    t->notes.push_back(
        "GFLOPS count 2 flops per multiply-add over the blocks flex computes (partial blocks at full size): forward "
        "QK^T and PV, backward the 5 products of a flash backward (S, dP, dV, dK, dQ)");
    t->notes.push_back(
        "dense: sdpa with the mask as an [L, S] bool tensor, timed once per L and quoted for each masked row of that "
        "L; the causal row's dense baseline is sdpa(causal=true)");
    t->notes.push_back(fmt::format(
        "times (wall clock): flex is the median of {} runs after a warm-up run; dense below L = 16384 the median of "
        "{} after a warm-up; dense at L >= 16384 one run without warm-up (tens of seconds each)",
        reps, dense_reps));
  }
  return {std::move(fwd), std::move(bwd), std::move(dense_tab)};
}

// create_block_mask at 1M (memory: block lists, and growth of the process's peak RSS).
BenchTable block_mask_build_table() {
  BenchTable build{"attention: create_block_mask, causal, L = S = 1,048,576, block 128",
                   {"ms", "blocks", "list bytes", "peak RSS growth MB"},
                   {},
                   {}};
  const std::int64_t n = 1 << 20;
  const long rss0 = peak_rss_kb();
  const auto t0 = std::chrono::steady_clock::now();
  const BlockMask bm = create_block_mask(MaskMod::causal(), 1, 1, n, n);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const long rss1 = peak_rss_kb();
  build.rows.push_back({ms, bm.nonempty_blocks(), static_cast<std::int64_t>(bm.bytes()),
                        static_cast<double>(rss1 - rss0) / 1024.0});
  build.notes.push_back("peak RSS growth is 0 when the build stays below the process's earlier peak");
  return build;
}

}  // namespace

std::vector<BenchTable> run_attention_suite(const BenchOptions& options) {
  std::vector<BenchTable> tables;
  FlexTables flex;
  const bool with_flex = section_wanted(options, "flex");
  if (with_flex) {
    flex = flex_vs_dense_tables(options);
    tables.push_back(std::move(flex.fwd));
    tables.push_back(std::move(flex.bwd));
  }
  if (section_wanted(options, "bf16"))
    for (BenchTable& t : run_attention_bf16(options)) tables.push_back(std::move(t));
  if (with_flex) tables.push_back(std::move(flex.dense));
  if (section_wanted(options, "mask")) tables.push_back(block_mask_build_table());
  return tables;
}

}  // namespace lmcore::bench
