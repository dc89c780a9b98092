#include "lmcore/core/matmul.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/common/bounds.h"
#include "tests/core/op_test_util.h"

namespace lmcore {
namespace {

using bounds::Bound;
using bounds::close_within;
using testing::random_tensor;
using testing::throws_with;

// Bounds (tests/common/bounds.h): |got - want| <= eps (a T + r |want|), eps of the dtype, where want is
// the exact f64 product and T = max (|A| |B|)_ij, the size of the terms each dot product sums (a
// product that cancels is not held to its own small size). r = 1/2 is the final rounding of bf16 and
// f16 (f32 accumulation, rounded once); a covers the accumulation, sgemm's or dgemm's in f32 and f64.
// Measured with LMCORE_TEST_REPORT_ERRORS=1 build/release/tests/core/test_core --gtest_filter='Matmul*'
// (K <= 33), in eps T: f64 0.91 (4, 0), f32 1.16 (4, 0), bf16 0.35 (1/64, 1/2; the worst element uses
// 92% of the bound), f16 0.39 (1/8, 1/2; 66%). Before: rtol 1e-5 (f32, ~84 eps), 1/128 (bf16: twice
// the rounding), 1/1024 (f16), plus 2e-6 (K + 1) absolute for all, against a reference that shared
// matmul's plan() and was rounded to the input dtype.
Bound bound_of(DType d) {
  switch (d) {
    case DType::bf16: return {1.0 / 64, 0.5};
    case DType::f16: return {1.0 / 8, 0.5};
    default: return {4, 0};  // f32, f64
  }
}

Tensor abs_of(const Tensor& t) {
  std::vector<double> x = t.to_vector<double>();
  for (double& e : x) e = std::abs(e);
  return Tensor::from_vector(x, t.shape());
}

void expect_close_to_reference(const Tensor& a, const Tensor& b, const std::string& what) {
  const Tensor got = matmul(a, b);
  ASSERT_EQ(got.dtype(), a.dtype()) << what;
  const Tensor want = matmul_reference(a, b);
  const double terms = bounds::max_abs(matmul_reference(abs_of(a), abs_of(b)));
  EXPECT_TRUE(close_within(what, got, want, a.dtype(), bound_of(a.dtype()), terms));
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
