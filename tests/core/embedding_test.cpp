#include "lmcore/core/embedding.h"

#include <gtest/gtest.h>

#include <random>

#include "lmcore/core/parallel.h"
#include "tests/core/op_test_util.h"

namespace lmcore {
namespace {

using testing::all_close;
using testing::random_tensor;
using testing::same_bits;
using testing::throws_with;

Tensor random_ids(const Shape& shape, std::int64_t V, std::uint32_t seed, DType dtype = DType::i64) {
  std::mt19937 gen(seed);
  // Skewed towards small ids so that duplicates are common.
  std::uniform_int_distribution<std::int64_t> dist(0, V - 1);
  std::vector<std::int64_t> v(static_cast<std::size_t>(checked_numel(shape)));
  for (auto& x : v) x = std::min(dist(gen), dist(gen));
  return Tensor::from_vector(v, shape).to(dtype);
}

TEST(Embedding, ForwardCopiesRowsForEveryDTypeAndLayout) {
  std::uint32_t seed = 1;
  for (DType dt : testing::compute_dtypes()) {
    for (std::int64_t D : {1, 7, 8, 9, 33}) {
      const Tensor w = random_tensor({11, D}, dt, seed++);
      const Tensor wt = random_tensor({D, 11}, dt, seed++).transpose(0, 1);  // column-strided weight
      for (DType id_type : {DType::i64, DType::i32}) {
        const Tensor ids = random_ids({3, 4}, 11, seed++, id_type);
        for (const Tensor& weight : {w, wt}) {
          const Tensor out = embedding(weight, ids, 0);
          ASSERT_EQ(out.shape(), (Shape{3, 4, D}));
          const auto id = ids.to_vector<std::int64_t>();
          for (std::size_t i = 0; i < id.size(); ++i)
            EXPECT_TRUE(same_bits(out.reshape({12, D}).select(0, static_cast<std::int64_t>(i)),
                                  weight.select(0, id[i]).contiguous()))
                << dt << " D=" << D << " position " << i;
        }
      }
    }
  }
}

TEST(Embedding, BackwardMatchesReferenceForEveryFloatDType) {
  std::uint32_t seed = 50;
  for (DType dt : testing::float_dtypes()) {
    for (std::int64_t D : {1, 7, 8, 9, 33, 64}) {
      const std::int64_t V = 17;
      const Tensor ids = random_ids({5, 13}, V, seed++);
      const Tensor grad = testing::strided_copy(random_tensor({5, 13, D}, dt, seed++, -1, 1));
      for (std::optional<std::int64_t> pad : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{0},
                                              std::optional<std::int64_t>{-1}}) {
        for (bool scale : {false, true}) {
          const Tensor got = embedding_backward(grad, ids, V, pad, scale);
          const Tensor want = embedding_backward_reference(grad, ids, V, pad, scale);
          // Both sum in >= f32 and round once; allow the f32 summation error plus one output rounding.
          const double rtol = dt == DType::bf16 ? 1.0 / 128 : dt == DType::f16 ? 1.0 / 1024 : 1e-6;
          EXPECT_TRUE(all_close(got, want, rtol, 1e-5)) << dt << " D=" << D << " scale " << scale;
          if (pad.has_value()) {
            const std::int64_t p = *pad < 0 ? *pad + V : *pad;
            EXPECT_TRUE(same_bits(got.select(0, p), Tensor::zeros({D}, dt))) << "padding row must get zero gradient";
          }
        }
      }
    }
  }
}

TEST(Embedding, BackwardSumsDuplicatesInF32ForBF16) {
  // 1000 copies of 0.01 into one row: a bf16 running sum would stall near 2; f32 accumulation gives ~10.
  const Tensor ids = Tensor::zeros({1000}, DType::i64);
  const Tensor grad = Tensor::full({1000, 4}, 0.01, DType::bf16);
  const Tensor g = embedding_backward(grad, ids, 3);
  EXPECT_NEAR(g.item_as_double({0, 0}), 1000 * bf16::from_f32(0.01f).to_f32(), 0.05);
  EXPECT_EQ(g.item_as_double({1, 0}), 0.0);  // rows never hit are zero
}

TEST(Embedding, BackwardIsDeterministicAcrossThreadCounts) {
  const Tensor ids = random_ids({64, 256}, 1000, 9);
  const Tensor grad = random_tensor({64, 256, 48}, DType::f32, 10, -1, 1);
  const int threads = num_threads();
  set_num_threads(1);
  const Tensor a = embedding_backward(grad, ids, 1000);
  set_num_threads(2);
  const Tensor b = embedding_backward(grad, ids, 1000);
  set_num_threads(threads);
  EXPECT_TRUE(same_bits(a, b));
}

TEST(Embedding, EmptyIndices) {
  const Tensor w = random_tensor({5, 3}, DType::f32, 1);
  EXPECT_EQ(embedding(w, Tensor::zeros({0}, DType::i64)).shape(), (Shape{0, 3}));
  EXPECT_TRUE(same_bits(embedding_backward(Tensor::zeros({0, 3}, DType::f32), Tensor::zeros({0}, DType::i64), 5),
                        Tensor::zeros({5, 3}, DType::f32)));
}

TEST(Embedding, BadArgumentsThrowNamedErrors) {
  const Tensor w = Tensor::zeros({5, 3}, DType::f32);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 5}, {2});
  EXPECT_TRUE(throws_with([&] { (void)embedding(w, ids); }, {"embedding", "'indices'", "value 5", "position 1", "0 <= index < 5"}));
  EXPECT_TRUE(throws_with([&] { (void)embedding(w, Tensor::zeros({2}, DType::f32)); }, {"embedding", "i64 or i32", "f32"}));
  EXPECT_TRUE(throws_with([&] { (void)embedding(Tensor::zeros({5}, DType::f32), ids); }, {"embedding", "'weight'", "2 dims"}));
  EXPECT_TRUE(throws_with([&] { (void)embedding(w, Tensor::zeros({2}, DType::i64), 5); }, {"embedding", "padding_idx", "5"}));
  EXPECT_TRUE(throws_with([&] { (void)embedding_backward(Tensor::zeros({3, 4}, DType::f32), Tensor::zeros({2}, DType::i64), 5); },
                          {"embedding_backward", "grad_output", "[2]", "[3, 4]"}));
  EXPECT_TRUE(throws_with([&] { (void)embedding_backward(Tensor::zeros({2, 4}, DType::i32), Tensor::zeros({2}, DType::i64), 5); },
                          {"embedding_backward", "grad_output", "floating"}));
}

}  // namespace
}  // namespace lmcore
