#include "lmcore/core/matmul.h"

#include <gtest/gtest.h>

#include "tests/core/op_test_util.h"

namespace lmcore {
namespace {

using testing::all_close;
using testing::random_tensor;
using testing::throws_with;

double rtol_of(DType d) {
  switch (d) {
    case DType::bf16: return 1.0 / 128;
    case DType::f16: return 1.0 / 1024;
    case DType::f32: return 1e-5;
    default: return 1e-12;
  }
}

// Values in [-1, 1]; a product over K terms has an absolute error ~ K * eps(compute) on top of the output
// rounding.
void expect_close_to_reference(const Tensor& a, const Tensor& b, const std::string& what) {
  const Tensor got = matmul(a, b);
  const Tensor want = matmul_reference(a, b);
  const std::int64_t k = a.dim() == 1 ? a.size(0) : a.size(-1);
  const double atol = (a.dtype() == DType::f64 ? 1e-13 : 2e-6) * static_cast<double>(k + 1);
  EXPECT_TRUE(all_close(got, want, rtol_of(a.dtype()), atol)) << what;
}

TEST(Matmul, ShapesAroundTheBlockSizesForEveryDType) {
  std::uint32_t seed = 1;
  for (DType dt : testing::float_dtypes()) {
    for (std::int64_t m : {1, 7, 17}) {
      for (std::int64_t k : {1, 8, 33}) {
        for (std::int64_t n : {1, 9, 16}) {
          const Tensor a = random_tensor({m, k}, dt, seed++, -1, 1);
          const Tensor b = random_tensor({k, n}, dt, seed++, -1, 1);
          expect_close_to_reference(a, b, fmt::format("{} m={} k={} n={}", dt, m, k, n));
        }
      }
    }
  }
}

TEST(Matmul, BatchedAndBroadcastBatchDims) {
  std::uint32_t seed = 100;
  for (DType dt : testing::float_dtypes()) {
    const Tensor a = random_tensor({2, 3, 5, 4}, dt, seed++, -1, 1);
    const Tensor b = random_tensor({3, 4, 6}, dt, seed++, -1, 1);  // broadcast over the leading 2
    const Tensor out = matmul(a, b);
    EXPECT_EQ(out.shape(), (Shape{2, 3, 5, 6}));
    expect_close_to_reference(a, b, fmt::format("{} batched broadcast", dt));
    const Tensor c = random_tensor({1, 5, 4}, dt, seed++, -1, 1);  // size-1 batch dim
    expect_close_to_reference(c, b, fmt::format("{} size-1 batch", dt));
  }
}

TEST(Matmul, TransposedAndStridedViews) {
  std::uint32_t seed = 200;
  for (DType dt : testing::float_dtypes()) {
    const Tensor at = random_tensor({9, 7}, dt, seed++, -1, 1).transpose(0, 1);  // [7, 9], column-major
    const Tensor bt = random_tensor({5, 9}, dt, seed++, -1, 1).transpose(0, 1);  // [9, 5]
    expect_close_to_reference(at, bt, fmt::format("{} both transposed", dt));
    const Tensor as = testing::strided_copy(random_tensor({7, 9}, dt, seed++, -1, 1));  // inner stride 2
    expect_close_to_reference(as, bt, fmt::format("{} inner-strided", dt));
    const Tensor ab = random_tensor({4, 9, 7}, dt, seed++, -1, 1).transpose(1, 2);  // batched transposed
    const Tensor bb = random_tensor({4, 9, 3}, dt, seed++, -1, 1);
    expect_close_to_reference(ab, bb, fmt::format("{} batched transposed", dt));
  }
}

TEST(Matmul, OneDimensionalOperands) {
  std::uint32_t seed = 300;
  for (DType dt : testing::float_dtypes()) {
    const Tensor v = random_tensor({6}, dt, seed++, -1, 1);
    const Tensor w = random_tensor({6}, dt, seed++, -1, 1);
    const Tensor m = random_tensor({6, 4}, dt, seed++, -1, 1);
    const Tensor bm = random_tensor({3, 5, 6}, dt, seed++, -1, 1);
    EXPECT_EQ(matmul(v, w).dim(), 0);
    expect_close_to_reference(v, w, "dot");
    EXPECT_EQ(matmul(v, m).shape(), (Shape{4}));
    expect_close_to_reference(v, m, "vector @ matrix");
    EXPECT_EQ(matmul(m.transpose(0, 1), v).shape(), (Shape{4}));
    expect_close_to_reference(m.transpose(0, 1), v, "matrix @ vector");
    EXPECT_EQ(matmul(bm, v).shape(), (Shape{3, 5}));
    expect_close_to_reference(bm, v, "batched matrix @ vector");
    EXPECT_EQ(matmul(v, bm.transpose(1, 2)).shape(), (Shape{3, 5}));
  }
}

TEST(Matmul, LowPrecisionAccumulatesInF32) {
  // 512 products of 1 * 1 in bf16: a bf16 accumulator would stop at 256.
  const Tensor a = Tensor::full({1, 512}, 1.0, DType::bf16);
  const Tensor b = Tensor::full({512, 1}, 1.0, DType::bf16);
  EXPECT_EQ(matmul(a, b).item_as_double({0, 0}), 512.0);
  EXPECT_EQ(matmul(a, b).dtype(), DType::bf16);
}

TEST(Matmul, EmptyDims) {
  const Tensor a = Tensor::zeros({3, 0}, DType::f32), b = Tensor::zeros({0, 4}, DType::f32);
  const Tensor out = matmul(a, b);
  EXPECT_EQ(out.shape(), (Shape{3, 4}));
  for (float v : out.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(matmul(Tensor::zeros({0, 5}, DType::f32), Tensor::zeros({5, 2}, DType::f32)).shape(), (Shape{0, 2}));
}

TEST(Matmul, BadArgumentsThrowNamedErrors) {
  EXPECT_TRUE(throws_with([] { (void)matmul(Tensor::zeros({2, 3}, DType::f32), Tensor::zeros({4, 2}, DType::f32)); },
                          {"matmul", "inner dimensions", "3 vs 4"}));
  EXPECT_TRUE(throws_with([] { (void)matmul(Tensor::zeros({2, 3}, DType::f32), Tensor::zeros({3, 2}, DType::f64)); },
                          {"matmul", "same dtype", "f32", "f64"}));
  EXPECT_TRUE(throws_with([] { (void)matmul(Tensor::zeros({2, 3}, DType::i32), Tensor::zeros({3, 2}, DType::i32)); },
                          {"matmul", "i32"}));
  EXPECT_TRUE(throws_with([] { (void)matmul(Tensor::zeros({2, 2, 3}, DType::f32), Tensor::zeros({3, 3, 2}, DType::f32)); },
                          {"matmul", "broadcast"}));
}

}  // namespace
}  // namespace lmcore
