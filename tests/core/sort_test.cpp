#include "lmcore/core/sort.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/core/op_test_util.h"

namespace lmcore {
namespace {

using testing::random_tensor;
using testing::same_bits;
using testing::throws_with;

TEST(Sort, EveryDTypeLengthAndDirectionMatchesStableReference) {
  std::uint32_t seed = 1;
  for (DType dt : testing::compute_dtypes()) {
    std::vector<std::int64_t> lengths = testing::awkward_sizes();
    lengths.push_back(0);
    lengths.push_back(5000);
    for (std::int64_t n : lengths) {
      // Narrow value range: many ties, which stability must order by position.
      const Tensor x = random_tensor({2, n}, dt, seed++, -20, 20);
      for (bool desc : {false, true}) {
        const SortResult got = sort(x, 1, desc);
        const SortResult want = sort_reference(x, 1, desc);
        EXPECT_TRUE(same_bits(got.values, want.values)) << dt << " n=" << n << " desc=" << desc;
        EXPECT_TRUE(same_bits(got.indices, want.indices)) << dt << " n=" << n << " desc=" << desc;
      }
    }
  }
}

TEST(Sort, AlongEveryDimOfStridedInput) {
  std::uint32_t seed = 77;
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    const Tensor base = random_tensor({4, 9, 6}, dt, seed++, -5, 5);
    for (const Tensor& x : {testing::strided_copy(base), base.transpose(0, 2)}) {
      for (std::int64_t d : {0, 1, 2, -1}) {
        for (bool desc : {false, true}) {
          const SortResult got = sort(x, d, desc, true);
          const SortResult want = sort_reference(x, d, desc);
          EXPECT_TRUE(same_bits(got.values, want.values)) << dt << " dim " << d;
          EXPECT_TRUE(same_bits(got.indices, want.indices)) << dt << " dim " << d;
        }
      }
    }
  }
}

TEST(Sort, NaNLastAscendingFirstDescendingAndSignedZerosTie) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v{3.0f, nan, -0.0f, -inf, 0.0f, inf, nan, -1.0f};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (std::int64_t reps : {1, 10}) {  // 8 elements (insertion sort) and 80 (radix)
      std::vector<float> w;
      for (std::int64_t r = 0; r < reps; ++r) w.insert(w.end(), v.begin(), v.end());
      const Tensor x = Tensor::from_vector(w, {static_cast<std::int64_t>(w.size())}).to(dt);
      const SortResult up = sort(x, 0, false);
      const auto uv = up.values.to_vector<double>();
      EXPECT_TRUE(std::isnan(uv.back()));
      EXPECT_EQ(uv.front(), -inf);
      const SortResult down = sort(x, 0, true);
      const auto dv = down.values.to_vector<double>();
      EXPECT_TRUE(std::isnan(dv.front()));
      EXPECT_EQ(dv.back(), -inf);
      EXPECT_TRUE(same_bits(up.indices, sort_reference(x, 0, false).indices)) << dt;
      EXPECT_TRUE(same_bits(down.indices, sort_reference(x, 0, true).indices)) << dt;
    }
  }
  // -0.0 at position 2 and +0.0 at 4 are equal: stable order keeps 2 before 4 both ways.
  const Tensor x = Tensor::from_vector(v, {8});
  const auto idx = sort(x, 0, false).indices.to_vector<std::int64_t>();
  EXPECT_EQ(idx, (std::vector<std::int64_t>{3, 7, 2, 4, 0, 5, 1, 6}));
  const auto didx = sort(x, 0, true).indices.to_vector<std::int64_t>();
  EXPECT_EQ(didx, (std::vector<std::int64_t>{1, 6, 5, 0, 2, 4, 7, 3}));
}

TEST(Sort, ExtremeIntegers) {
  const std::vector<std::int64_t> v{0, std::numeric_limits<std::int64_t>::max(), -1,
                                    std::numeric_limits<std::int64_t>::min(), 1};
  const Tensor x = Tensor::from_vector(v, {5});
  EXPECT_EQ(sort(x).values.to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), -1, 0, 1,
                                       std::numeric_limits<std::int64_t>::max()}));
}

TEST(TopK, MatchesReferenceForEveryDTypeAndK) {
  std::uint32_t seed = 300;
  for (DType dt : testing::compute_dtypes()) {
    if (dt == DType::boolean) continue;
    for (std::int64_t n : {1, 7, 33, 200}) {
      const Tensor x = testing::strided_copy(random_tensor({3, n}, dt, seed++, -10, 10));
      for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, n / 3, n - 1, n}) {
        if (k < 0) continue;
        for (bool largest : {true, false}) {
          const SortResult got = topk(x, k, 1, largest);
          const SortResult want = topk_reference(x, k, 1, largest);
          EXPECT_TRUE(same_bits(got.values, want.values)) << dt << " n=" << n << " k=" << k << " largest=" << largest;
          EXPECT_TRUE(same_bits(got.indices, want.indices)) << dt << " n=" << n << " k=" << k;
        }
      }
    }
  }
}

TEST(TopK, AlongDimZeroAndWithNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector(std::vector<float>{1, nan, 5, 2, 5, 0}, {6, 1});
  const SortResult top = topk(x, 2, 0, true);
  EXPECT_TRUE(std::isnan(top.values.item_as_double({0, 0})));
  EXPECT_EQ(top.values.item_as_double({1, 0}), 5.0);
  EXPECT_EQ(top.indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  const SortResult low = topk(x, 2, 0, false);
  EXPECT_EQ(low.indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 0}));
}

TEST(Sort, BadArgumentsThrowNamedErrors) {
  const Tensor x = Tensor::zeros({2, 5}, DType::f32);
  EXPECT_TRUE(throws_with([&] { (void)topk(x, 6, 1); }, {"topk", "'k' = 6", "0 <= k <= 5"}));
  EXPECT_TRUE(throws_with([&] { (void)topk(x, -1, 1); }, {"topk", "'k' = -1"}));
  EXPECT_TRUE(throws_with([&] { (void)topk(Tensor::zeros({3}, DType::boolean), 1); }, {"topk", "bool"}));
  EXPECT_TRUE(throws_with([&] { (void)sort(x, 2); }, {"sort"}));
  EXPECT_TRUE(throws_with([&] { (void)sort(Tensor::zeros({3}, DType::u32)); }, {"sort", "storage-only"}));
}

}  // namespace
}  // namespace lmcore
