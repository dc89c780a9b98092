#include "lmcore/core/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/core/op_test_util.h"

namespace lmcore {
namespace {

using testing::random_tensor;
using testing::same_bits;
using testing::throws_with;

const CompareOp kOps[] = {CompareOp::eq, CompareOp::ne, CompareOp::lt, CompareOp::le, CompareOp::gt, CompareOp::ge};

TEST(Compare, EveryDTypePairBroadcastAndStridedMatchesReference) {
  std::uint32_t seed = 1;
  for (DType da : testing::compute_dtypes())
    for (DType db : testing::compute_dtypes()) {
      // Small integers in both so that equal values occur across dtypes.
      const Tensor a = random_tensor({3, 1, 6}, da, seed++, -3, 3);
      const Tensor b = testing::strided_copy(random_tensor({4, 6}, db, seed++, -3, 3));
      for (CompareOp op : kOps) {
        const Tensor got = compare(op, a, b);
        ASSERT_EQ(got.shape(), (Shape{3, 4, 6}));
        ASSERT_EQ(got.dtype(), DType::boolean);
        EXPECT_TRUE(same_bits(got, compare_reference(op, a, b))) << compare_op_name(op) << " " << da << " " << db;
        // Transposed operand: a strided non-dense layout.
        const Tensor at = random_tensor({6, 4}, da, seed++, -3, 3).transpose(0, 1);
        EXPECT_TRUE(same_bits(compare(op, at, b), compare_reference(op, at, b))) << compare_op_name(op);
      }
    }
}

TEST(Compare, VectorKernelsAtAwkwardLengths) {
  std::uint32_t seed = 50;
  for (DType dt : {DType::f32, DType::i32, DType::i16, DType::i8, DType::u8, DType::f64, DType::bf16, DType::i64}) {
    for (std::int64_t n : testing::awkward_sizes()) {
      const Tensor a = random_tensor({n}, dt, seed++, -3, 3);
      const Tensor b = random_tensor({n}, dt, seed++, -3, 3);
      const Tensor s = random_tensor({1}, dt, seed++, -3, 3);
      // Offset views: misaligned starts.
      const Tensor a1 = random_tensor({n + 1}, dt, seed++, -3, 3).narrow(0, 1, n);
      for (CompareOp op : kOps) {
        EXPECT_TRUE(same_bits(compare(op, a, b), compare_reference(op, a, b))) << dt << " n=" << n;
        EXPECT_TRUE(same_bits(compare(op, a1, b), compare_reference(op, a1, b))) << dt << " n=" << n;
        EXPECT_TRUE(same_bits(compare(op, a, s), compare_reference(op, a, s))) << dt << " n=" << n << " scalar right";
        EXPECT_TRUE(same_bits(compare(op, s, a), compare_reference(op, s, a))) << dt << " n=" << n << " scalar left";
      }
    }
  }
}

TEST(Compare, NaNIsUnequalToEverything) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t n : {3, 40}) {
    std::vector<float> va(static_cast<std::size_t>(n), nan), vb(static_cast<std::size_t>(n), 1.0f);
    vb[0] = nan;
    const Tensor a = Tensor::from_vector(va, {n}), b = Tensor::from_vector(vb, {n});
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      const Tensor x = a.to(dt), y = b.to(dt);
      for (CompareOp op : kOps) {
        const auto got = compare(op, x, y).to_vector<bool>();
        for (bool g : got) EXPECT_EQ(g, op == CompareOp::ne) << compare_op_name(op) << " " << dt;
      }
    }
  }
}

TEST(Compare, ExactValuesAndPromotion) {
  const Tensor a = Tensor::from_vector(std::vector<std::int32_t>{1, 2, 3}, {3});
  const Tensor b = Tensor::from_vector(std::vector<float>{1.5f, 2.0f, 2.5f}, {3});
  EXPECT_EQ(lt(a, b).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(eq(a, b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(ge(a, b).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  // u8 255 vs i8 -1: promoted to i16, so they differ (no wrap-around).
  const Tensor u = Tensor::from_vector(std::vector<std::uint8_t>{255}, {1});
  const Tensor s = Tensor::from_vector(std::vector<std::int8_t>{-1}, {1});
  EXPECT_EQ(eq(u, s).to_vector<bool>(), (std::vector<bool>{false}));
  EXPECT_EQ(gt(u, s).to_vector<bool>(), (std::vector<bool>{true}));
  // i64 values that differ only below f64 precision still compare exactly.
  const std::int64_t big = (std::int64_t{1} << 60) + 1;
  const Tensor i = Tensor::from_vector(std::vector<std::int64_t>{big}, {1});
  EXPECT_EQ(compare_scalar(CompareOp::eq, i, big - 1).to_vector<bool>(), (std::vector<bool>{false}));
  EXPECT_EQ(compare_scalar(CompareOp::eq, i, big).to_vector<bool>(), (std::vector<bool>{true}));
  // An int tensor against a float scalar compares in f32: 2 < 2.5.
  EXPECT_EQ(compare_scalar(CompareOp::lt, a, 2.5).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  // Bool tensors: false < true.
  const Tensor t = Tensor::from_vector(std::vector<bool>{true, false}, {2});
  EXPECT_EQ(lt(t, Tensor::from_vector(std::vector<bool>{false, true}, {2})).to_vector<bool>(),
            (std::vector<bool>{false, true}));
  // -0.0 == +0.0.
  const Tensor z = Tensor::from_vector(std::vector<float>{-0.0f}, {1});
  EXPECT_EQ(compare_scalar(CompareOp::eq, z, 0.0).to_vector<bool>(), (std::vector<bool>{true}));
}

TEST(Compare, EmptyAndZeroDim) {
  EXPECT_EQ(eq(Tensor::zeros({0, 3}, DType::f32), Tensor::zeros({3}, DType::f32)).shape(), (Shape{0, 3}));
  EXPECT_EQ(eq(Tensor::zeros({}, DType::f32), Tensor::zeros({}, DType::i64)).to_vector<bool>(), (std::vector<bool>{true}));
}

TEST(Compare, BadArgumentsThrowNamedErrors) {
  EXPECT_TRUE(throws_with([] { (void)lt(Tensor::zeros({3}, DType::f32), Tensor::zeros({4}, DType::f32)); },
                          {"lt", "[3]", "[4]"}));
  EXPECT_TRUE(throws_with([] { (void)eq(Tensor::zeros({3}, DType::f8_e5m2), Tensor::zeros({3}, DType::f32)); },
                          {"eq", "input", "storage-only"}));
  EXPECT_TRUE(throws_with([] { (void)compare_op_from_name("lte"); }, {"lte", "eq, ne"}));
}

}  // namespace
}  // namespace lmcore
