// Google Benchmark cases for the tensor core's ops: reductions, comparisons, sort/topk, embedding
// backward, gather/scatter_add, and the f32 -> bf16 cast. Run: build/release/bench/gbench_core
// [--benchmark_filter=Sum]. Bytes/items per second are reported so sizes can be compared.
#include <benchmark/benchmark.h>

#include <random>

#include "lmcore/core/compare.h"
#include "lmcore/core/copy.h"
#include "lmcore/core/embedding.h"
#include "lmcore/core/gather_scatter.h"
#include "lmcore/core/reduce.h"
#include "lmcore/core/sort.h"

namespace lmcore {
namespace {

Tensor random_f32(const Shape& shape, std::uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

Tensor random_ids(std::int64_t n, std::int64_t limit, std::uint32_t seed) {
  Tensor t = Tensor::empty({n}, DType::i64);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, limit - 1);
  for (std::int64_t i = 0; i < n; ++i) t.data<std::int64_t>()[i] = dist(gen);
  return t;
}

// Rows of 16384: args = rows, dtype (0 f32, 1 bf16), reduced dim (1 rows, 0 columns).
void BM_Sum(benchmark::State& state) {
  const std::int64_t rows = state.range(0);
  const DType dt = state.range(1) == 0 ? DType::f32 : DType::bf16;
  const Tensor x = random_f32({rows, 16384}, 1).to(dt);
  const Shape dims{state.range(2)};
  for (auto _ : state) benchmark::DoNotOptimize(sum(x, dims));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(x.nbytes()));
}
BENCHMARK(BM_Sum)->Args({64, 0, 1})->Args({1024, 0, 1})->Args({1024, 1, 1})->Args({1024, 0, 0})->Unit(benchmark::kMicrosecond);

void BM_Amax(benchmark::State& state) {
  const Tensor x = random_f32({state.range(0), 16384}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(amax(x, {1}));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(x.nbytes()));
}
BENCHMARK(BM_Amax)->Arg(1024)->Unit(benchmark::kMicrosecond);

void BM_Logsumexp(benchmark::State& state) {
  const Tensor x = random_f32({state.range(0), 50257}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(logsumexp(x, {1}));
  state.SetItemsProcessed(state.iterations() * x.numel());
}
BENCHMARK(BM_Logsumexp)->Arg(64)->Unit(benchmark::kMicrosecond);

void BM_CompareLt(benchmark::State& state) {
  const Tensor a = random_f32({state.range(0)}, 4), b = random_f32({state.range(0)}, 5);
  for (auto _ : state) benchmark::DoNotOptimize(lt(a, b));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(a.nbytes() * 2));
}
BENCHMARK(BM_CompareLt)->Arg(1 << 20)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);

// args = rows of 65536, dtype (0 f32, 1 i64)
void BM_Sort(benchmark::State& state) {
  const Tensor f = random_f32({state.range(0), 65536}, 6);
  const Tensor x = state.range(1) == 0 ? f : f.to(DType::f64).to(DType::i64);
  for (auto _ : state) benchmark::DoNotOptimize(sort(x, -1));
  state.SetItemsProcessed(state.iterations() * x.numel());
}
BENCHMARK(BM_Sort)->Args({16, 0})->Args({64, 0})->Args({16, 1})->Unit(benchmark::kMillisecond);

void BM_TopK(benchmark::State& state) {
  const Tensor x = random_f32({64, 50257}, 7);
  for (auto _ : state) benchmark::DoNotOptimize(topk(x, state.range(0), -1));
  state.SetItemsProcessed(state.iterations() * x.numel());
}
BENCHMARK(BM_TopK)->Arg(1)->Arg(50)->Unit(benchmark::kMillisecond);

// args = tokens, dtype (0 f32, 1 bf16); V = 50257, D = 768 (GPT-2).
void BM_EmbeddingBackward(benchmark::State& state) {
  const std::int64_t tokens = state.range(0), V = 50257, D = 768;
  const DType dt = state.range(1) == 0 ? DType::f32 : DType::bf16;
  const Tensor ids = random_ids(tokens, V, 8);
  const Tensor g = random_f32({tokens, D}, 9).to(dt);
  for (auto _ : state) benchmark::DoNotOptimize(embedding_backward(g, ids, V));
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_EmbeddingBackward)->Args({2048, 0})->Args({8192, 0})->Args({8192, 1})->Unit(benchmark::kMillisecond);

void BM_EmbeddingForward(benchmark::State& state) {
  const Tensor w = random_f32({50257, 768}, 10);
  const Tensor ids = random_ids(state.range(0), 50257, 11);
  for (auto _ : state) benchmark::DoNotOptimize(embedding(w, ids));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_EmbeddingForward)->Arg(8192)->Unit(benchmark::kMillisecond);

void BM_GatherScatterAdd(benchmark::State& state) {
  const Tensor x = random_f32({4096, 512}, 12);
  Tensor index = random_ids(4096 * 64, 512, 13).view({4096, 64});
  for (auto _ : state) {
    Tensor g = gather(x, 1, index);
    benchmark::DoNotOptimize(scatter_add(x, 1, index, g));
  }
  state.SetItemsProcessed(state.iterations() * index.numel() * 2);
}
BENCHMARK(BM_GatherScatterAdd)->Unit(benchmark::kMillisecond);

void BM_CastF32ToBF16(benchmark::State& state) {
  const Tensor x = random_f32({state.range(0)}, 14);
  Tensor y = Tensor::empty({state.range(0)}, DType::bf16);
  for (auto _ : state) {
    copy_cast(x, y);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(x.nbytes() + y.nbytes()));
}
BENCHMARK(BM_CastF32ToBF16)->Arg(1 << 16)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lmcore

BENCHMARK_MAIN();
