#include "lmcore/core/gather_scatter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tests/core/op_test_util.h"

namespace lmcore {
namespace {

using testing::random_tensor;
using testing::same_bits;
using testing::throws_with;

// Random i64 indices in [0, limit) of the given shape.
Tensor random_index(const Shape& shape, std::int64_t limit, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, limit - 1);
  std::vector<std::int64_t> v(static_cast<std::size_t>(checked_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape);
}

TEST(Gather, EveryDTypeAndDimMatchesReference) {
  std::uint32_t seed = 1;
  for (DType dt : testing::compute_dtypes()) {
    const Tensor x = testing::strided_copy(random_tensor({4, 5, 6}, dt, seed++));
    for (std::int64_t d : {0, 1, 2, -1}) {
      const std::int64_t wd = d < 0 ? d + 3 : d;
      // index smaller than input in the other dims, and a different size along d.
      Shape ishape{3, 4, 5};
      ishape[static_cast<std::size_t>(wd)] = 7;
      const Tensor index = random_index(ishape, x.size(d), seed++);
      const Tensor got = gather(x, d, index);
      EXPECT_TRUE(same_bits(got, gather_reference(x, d, index))) << dt << " dim " << d;
      // Transposed (non-contiguous) index.
      const Tensor it = random_index({ishape[2], ishape[1], ishape[0]}, x.size(d), seed++).permute({2, 1, 0});
      EXPECT_TRUE(same_bits(gather(x, d, it), gather_reference(x, d, it))) << dt << " dim " << d;
    }
  }
}

TEST(Gather, PicksTheRightElements) {
  const Tensor x = Tensor::from_vector(std::vector<float>{10, 11, 12, 20, 21, 22}, {2, 3});
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{2, 0, 1, 1}, {2, 2});
  EXPECT_EQ(gather(x, 1, idx).to_vector<float>(), (std::vector<float>{12, 10, 21, 21}));
  EXPECT_EQ(gather(x, 0, Tensor::from_vector(std::vector<std::int64_t>{1, 0}, {1, 2})).to_vector<float>(),
            (std::vector<float>{20, 11}));
}

TEST(Scatter, AssignAddAndEveryReduceMatchReference) {
  std::uint32_t seed = 100;
  const ScatterReduce reduces[] = {ScatterReduce::sum, ScatterReduce::prod, ScatterReduce::amax, ScatterReduce::amin,
                                   ScatterReduce::mean};
  for (DType dt : testing::compute_dtypes()) {
    for (std::int64_t d : {0, 1, 2}) {
      const Tensor self = random_tensor({4, 5, 6}, dt, seed++, -3, 3);
      Shape ishape{3, 4, 5};
      ishape[static_cast<std::size_t>(d)] = 9;  // more entries than positions: duplicates
      // src larger than index in every dim (only its leading part is read), and strided.
      const Tensor source = testing::strided_copy(random_tensor({9, 9, 9}, dt, seed++, -3, 3));
      const Tensor index = random_index(ishape, self.size(d), seed++);
      // scatter with unique targets per fiber is order independent; with duplicates both keep the last.
      EXPECT_TRUE(same_bits(scatter(self, d, index, source), scatter_reference(0, self, d, index, source))) << dt;
      EXPECT_TRUE(same_bits(scatter_add(self, d, index, source), scatter_reference(1, self, d, index, source))) << dt;
      for (ScatterReduce r : reduces) {
        if (r == ScatterReduce::mean && dt == DType::boolean) continue;
        for (bool include_self : {true, false})
          EXPECT_TRUE(same_bits(scatter_reduce(self, d, index, source, r, include_self),
                                scatter_reference(2, self, d, index, source, r, include_self)))
              << dt << " dim " << d << " reduce " << static_cast<int>(r) << " include_self " << include_self;
      }
    }
  }
}

TEST(Scatter, ExactValues) {
  const Tensor self = Tensor::from_vector(std::vector<std::int64_t>{5, 7, 9}, {3});
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{0, 0, 1}, {3});
  const Tensor src = Tensor::from_vector(std::vector<std::int64_t>{2, 3, 4}, {3});
  EXPECT_EQ(scatter_add(self, 0, idx, src).to_vector<std::int64_t>(), (std::vector<std::int64_t>{10, 11, 9}));
  // torch: mean with self counted = floor((5+2+3)/3) = 3, (7+4)/2 = 5.
  EXPECT_EQ(scatter_reduce(self, 0, idx, src, ScatterReduce::mean).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{3, 5, 9}));
  EXPECT_EQ(scatter_reduce(self, 0, idx, src, ScatterReduce::mean, false).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{2, 4, 9}));
  const Tensor neg = Tensor::from_vector(std::vector<std::int64_t>{-2, -3, -4}, {3});
  EXPECT_EQ(scatter_reduce(self, 0, idx, neg, ScatterReduce::mean, false).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{-3, -4, 9}));  // floor(-2.5) = -3
  EXPECT_EQ(scatter_reduce(self, 0, idx, src, ScatterReduce::prod).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{30, 28, 9}));
  EXPECT_EQ(scatter_reduce(self, 0, idx, src, ScatterReduce::amax, false).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{3, 4, 9}));
  EXPECT_EQ(scatter(self, 0, Tensor::from_vector(std::vector<std::int64_t>{2}, {1}), -1.0).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{5, 7, -1}));
  // i8 sums wrap like torch's: 100 + 100 -> -56.
  const Tensor z8 = Tensor::zeros({3}, DType::i8);
  const Tensor hundred = Tensor::full({2}, 100, DType::i8);
  EXPECT_EQ(scatter_add(z8, 0, Tensor::from_vector(std::vector<std::int64_t>{0, 0}, {2}), hundred).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{-56, 0, 0}));
  // amax propagates NaN from src.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor f = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  const auto r = scatter_reduce(f, 0, Tensor::from_vector(std::vector<std::int64_t>{0, 0}, {2}),
                                Tensor::from_vector(std::vector<float>{nan, 1}, {2}), ScatterReduce::amax, false)
                     .to_vector<float>();
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[1], 2.0f);
}

TEST(Scatter, InPlaceOnAStridedView) {
  Tensor buf = Tensor::zeros({4, 6}, DType::f32);
  Tensor view = buf.slice(1, 0, 6, 2);  // [4, 3], stride 2
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{2, 0, 1, 2}, {4, 1});
  scatter_add_(view, 1, idx, Tensor::full({4, 1}, 1.5, DType::f32));
  const auto v = buf.to_vector<float>();
  EXPECT_EQ(v[4], 1.5f);       // row 0, view col 2 -> buf col 4
  EXPECT_EQ(v[6 + 0], 1.5f);   // row 1, col 0
  EXPECT_EQ(v[12 + 2], 1.5f);  // row 2, view col 1 -> buf col 2
  EXPECT_EQ(v[1], 0.0f);       // odd columns untouched
}

TEST(GatherScatter, EmptyIndex) {
  const Tensor x = random_tensor({3, 4}, DType::f32, 5);
  EXPECT_EQ(gather(x, 1, Tensor::zeros({3, 0}, DType::i64)).shape(), (Shape{3, 0}));
  EXPECT_TRUE(same_bits(scatter_add(x, 1, Tensor::zeros({3, 0}, DType::i64), Tensor::zeros({3, 0}, DType::f32)), x));
}

TEST(GatherScatter, BadArgumentsThrowNamedErrors) {
  const Tensor x = Tensor::zeros({2, 5}, DType::f32);
  const Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{0, 7, 1, 1}, {2, 2});
  EXPECT_TRUE(throws_with([&] { (void)gather(x, 1, bad); }, {"gather", "'index'", "index[0, 1] = 7", "0 <= index < 5", "dim 1"}));
  const Tensor neg = Tensor::from_vector(std::vector<std::int64_t>{-1}, {1, 1});
  EXPECT_TRUE(throws_with([&] { (void)scatter(x, 1, neg, 1.0); }, {"scatter", "= -1", "0 <= index < 5"}));
  EXPECT_TRUE(throws_with([&] { (void)gather(x, 1, Tensor::zeros({2, 2}, DType::i32)); }, {"gather", "'index'", "i64", "i32"}));
  EXPECT_TRUE(throws_with([&] { (void)gather(x, 1, Tensor::zeros({3, 2}, DType::i64)); }, {"gather", "size 3 in dim 0", "<= 2"}));
  EXPECT_TRUE(throws_with([&] { (void)gather(x, 1, Tensor::zeros({2}, DType::i64)); }, {"gather", "2 dims"}));
  EXPECT_TRUE(throws_with([&] { (void)scatter_add(x, 1, Tensor::zeros({2, 2}, DType::i64), Tensor::zeros({2, 2}, DType::f64)); },
                          {"scatter_add", "'src'", "f32", "f64"}));
  EXPECT_TRUE(throws_with([&] { (void)scatter_add(x, 1, Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({2, 2}, DType::f32)); },
                          {"scatter_add", "'src'", "<= 2"}));
  EXPECT_TRUE(throws_with([] { (void)scatter_reduce_from_name("max"); }, {"scatter_reduce", "'reduce'", "max", "amax"}));
  // A bad index leaves self untouched (checked before any write).
  Tensor self = Tensor::zeros({1, 3}, DType::f32);
  const Tensor mixed = Tensor::from_vector(std::vector<std::int64_t>{0, 3}, {1, 2});
  EXPECT_THROW(scatter_(self, 1, mixed, 1.0), Error);
  EXPECT_EQ(self.to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

}  // namespace
}  // namespace lmcore
