// Google Benchmark: flex attention forward and backward on a sliding window, the dense sdpa baseline,
// and create_block_mask at 1M. `lmcore bench attention` has the full comparison table.
#include <benchmark/benchmark.h>

#include "bench/random_fill.h"
#include "lmcore/attention/flex_attention.h"
#include "lmcore/attention/sdpa.h"

namespace {

using namespace lmcore;
using namespace lmcore::attention;
using lmcore::bench::random_uniform;

// args: L, window, block
void BM_FlexForward(benchmark::State& state) {
  const std::int64_t L = state.range(0), W = state.range(1), blk = state.range(2);
  const Tensor q = random_uniform({1, 8, L, 64}, 1), k = random_uniform({1, 8, L, 64}, 2), v = random_uniform({1, 8, L, 64}, 3);
  const BlockMask bm = create_block_mask(MaskMod::sliding_window(W), 1, 1, L, L, blk, blk);
  FlexOptions opt;
  opt.block_mask = &bm;
  for (auto _ : state) benchmark::DoNotOptimize(flex_attention(q, k, v, opt).out.data_ptr());
  state.counters["GFLOPS"] =
      benchmark::Counter(flex_flops(bm, 1, 8, 64, 64).forward * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FlexForward)->Args({4096, 64, 128})->Args({4096, 64, 64})->Args({4096, 256, 128})->Unit(benchmark::kMillisecond);

void BM_FlexBackward(benchmark::State& state) {
  const std::int64_t L = state.range(0), W = state.range(1), blk = state.range(2);
  const Tensor q = random_uniform({1, 8, L, 64}, 1), k = random_uniform({1, 8, L, 64}, 2), v = random_uniform({1, 8, L, 64}, 3);
  const Tensor g = random_uniform({1, 8, L, 64}, 4);
  const BlockMask bm = create_block_mask(MaskMod::sliding_window(W), 1, 1, L, L, blk, blk);
  FlexOptions opt;
  opt.block_mask = &bm;
  opt.return_lse = true;
  const FlexResult r = flex_attention(q, k, v, opt);
  for (auto _ : state) benchmark::DoNotOptimize(flex_attention_backward(q, k, v, r.out, r.lse, g, opt).dq.data_ptr());
  state.counters["GFLOPS"] =
      benchmark::Counter(flex_flops(bm, 1, 8, 64, 64).backward * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FlexBackward)->Args({4096, 64, 128})->Args({4096, 256, 128})->Unit(benchmark::kMillisecond);

void BM_SdpaDenseForward(benchmark::State& state) {
  const std::int64_t L = state.range(0);
  const Tensor q = random_uniform({1, 8, L, 64}, 1), k = random_uniform({1, 8, L, 64}, 2), v = random_uniform({1, 8, L, 64}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(sdpa(q, k, v).out.data_ptr());
  state.counters["GFLOPS"] = benchmark::Counter(4.0 * 8 * L * L * 64 * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SdpaDenseForward)->Arg(2048)->Unit(benchmark::kMillisecond);

void BM_CreateCausalBlockMask1M(benchmark::State& state) {
  for (auto _ : state) {
    const BlockMask bm = create_block_mask(MaskMod::causal(), 1, 1, 1 << 20, 1 << 20);
    benchmark::DoNotOptimize(bm.full.runs.data());
  }
}
BENCHMARK(BM_CreateCausalBlockMask1M)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
