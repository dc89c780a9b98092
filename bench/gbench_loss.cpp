// Google Benchmark for the loss part: fused vs unfused linear cross-entropy forward+backward, and the
// fused forward alone, at a size that runs in seconds (the full-size comparison is `lmcore bench lce`).
#include <benchmark/benchmark.h>

#include "lmcore/loss/linear_cross_entropy.h"

namespace {

using namespace lmcore;

Tensor fill(const Shape& shape, std::uint32_t seed, float scale, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  std::uint32_t s = seed;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * scale;
  }
  return t.to(dtype);
}

struct Inputs {
  Tensor hidden, weight, target, d_weight;
  Inputs(std::int64_t n, std::int64_t h, std::int64_t v, DType dtype)
      : hidden(fill({n, h}, 1, 2.0f, dtype)),
        weight(fill({v, h}, 2, 0.2f, dtype)),
        target(Tensor::empty({n}, DType::i64)),
        d_weight(Tensor::zeros({v, h}, DType::f32)) {
    for (std::int64_t i = 0; i < n; ++i) target.data<std::int64_t>()[i] = (i * 7919) % v;
  }
};

// Args: N, H, V, dtype (0 = f32, 1 = bf16).
DType dtype_arg(const benchmark::State& state) { return state.range(3) == 0 ? DType::f32 : DType::bf16; }

void BM_LceFusedFwdBwd(benchmark::State& state) {
  Inputs in(state.range(0), state.range(1), state.range(2), dtype_arg(state));
  const Tensor g = Tensor::full({}, 1.0, DType::f32);
  for (auto _ : state) {
    auto out = linear_cross_entropy_with_grad(in.hidden, in.weight, in.target, LossOptions(), g, in.d_weight, Tensor());
    benchmark::DoNotOptimize(out.loss.data_ptr());
  }
  state.counters["GFLOPS"] = benchmark::Counter(6.0 * state.range(0) * state.range(1) * state.range(2),
                                                benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_LceUnfusedFwdBwd(benchmark::State& state) {
  Inputs in(state.range(0), state.range(1), state.range(2), dtype_arg(state));
  const Tensor g = Tensor::full({}, 1.0, DType::f32);
  for (auto _ : state) {
    auto out = linear_cross_entropy_unfused_with_grad(in.hidden, in.weight, in.target, LossOptions(), g, in.d_weight,
                                                      Tensor());
    benchmark::DoNotOptimize(out.loss.data_ptr());
  }
  state.counters["GFLOPS"] = benchmark::Counter(6.0 * state.range(0) * state.range(1) * state.range(2),
                                                benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_LceFusedForward(benchmark::State& state) {
  Inputs in(state.range(0), state.range(1), state.range(2), dtype_arg(state));
  for (auto _ : state) {
    auto out = linear_cross_entropy(in.hidden, in.weight, in.target, LossOptions());
    benchmark::DoNotOptimize(out.loss.data_ptr());
  }
}

BENCHMARK(BM_LceFusedFwdBwd)->Args({512, 256, 32000, 0})->Args({512, 256, 32000, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LceUnfusedFwdBwd)->Args({512, 256, 32000, 0})->Args({512, 256, 32000, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LceFusedForward)->Args({512, 256, 32000, 0})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
