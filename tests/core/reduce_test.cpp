#include "lmcore/core/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lmcore/core/parallel.h"
#include "tests/core/op_test_util.h"

namespace lmcore {
namespace {

using testing::all_close;
using testing::random_tensor;
using testing::same_bits;
using testing::throws_with;

// Tolerance of a sum of n values of magnitude <= m accumulated in f32 (pairwise), then rounded to
// `out`: the reference is exact to f64, so allow the f32 accumulation error plus one output rounding.
double sum_atol(DType out, std::int64_t n, double m) {
  if (out == DType::f64) return 1e-12 * static_cast<double>(n) * m;
  return 2e-6 * static_cast<double>(n + 1) * m;
}
double out_rtol(DType out) {
  switch (out) {
    case DType::bf16: return 1.0 / 128;
    case DType::f16: return 1.0 / 1024;
    case DType::f32: return 1e-6;
    default: return 1e-12;
  }
}

Tensor run(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim) {
  switch (op) {
    case ReduceOp::sum: return sum(x, dims, keepdim);
    case ReduceOp::mean: return mean(x, dims, keepdim);
    case ReduceOp::amax: return amax(x, dims, keepdim);
    case ReduceOp::amin: return amin(x, dims, keepdim);
    case ReduceOp::logsumexp: return logsumexp(x, dims, keepdim);
    case ReduceOp::argmax:
      return dims.empty() ? argmax(x, std::nullopt, keepdim) : argmax(x, dims[0], keepdim);
    case ReduceOp::argmin:
      return dims.empty() ? argmin(x, std::nullopt, keepdim) : argmin(x, dims[0], keepdim);
  }
  return {};
}

bool op_supports(ReduceOp op, DType d) {
  if (op == ReduceOp::mean) return is_floating(d);
  if (op == ReduceOp::argmax || op == ReduceOp::argmin) return d != DType::boolean;
  return true;
}

// Compares op(x) against the reference: exact for the selections, tolerance for the arithmetic ones.
void expect_matches_reference(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim, const std::string& what) {
  const Tensor got = run(op, x, dims, keepdim);
  const Tensor want = reduce_reference(op, x, dims, keepdim);
  if (op == ReduceOp::amax || op == ReduceOp::amin || op == ReduceOp::argmax || op == ReduceOp::argmin ||
      !is_floating(want.dtype())) {
    EXPECT_TRUE(same_bits(got, want)) << what;
    return;
  }
  std::int64_t n = 1;
  for (auto d : (dims.empty() ? Shape{} : dims)) n *= x.size(d);
  if (dims.empty()) n = x.numel();
  const double m = op == ReduceOp::logsumexp ? 8.0 : 4.0;
  EXPECT_TRUE(all_close(got, want, out_rtol(want.dtype()), sum_atol(want.dtype(), n, m))) << what;
}

const ReduceOp kAllOps[] = {ReduceOp::sum,       ReduceOp::mean,   ReduceOp::amax,  ReduceOp::amin,
                            ReduceOp::logsumexp, ReduceOp::argmax, ReduceOp::argmin};

TEST(Reduce, EveryOpEveryDTypeEveryDimSetMatchesReference) {
  const std::vector<Shape> dim_sets{{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}};
  std::uint32_t seed = 1;
  for (DType dt : testing::compute_dtypes()) {
    const Tensor base = random_tensor({3, 5, 7}, dt, seed++);
    // Contiguous, strided (every other element), and permuted layouts.
    for (const Tensor& x : {base, testing::strided_copy(base), base.permute({2, 0, 1}).contiguous().permute({1, 2, 0})}) {
      for (ReduceOp op : kAllOps) {
        if (!op_supports(op, dt)) continue;
        for (const Shape& dims : dim_sets) {
          if ((op == ReduceOp::argmax || op == ReduceOp::argmin) && dims.size() > 1) continue;
          for (bool keepdim : {false, true})
            expect_matches_reference(op, x, dims, keepdim,
                                     fmt::format("op {} dtype {} dims [{}] keepdim {} strides {}", static_cast<int>(op), dt,
                                                 fmt::join(dims, ","), keepdim, shape_str(x.strides())));
        }
      }
    }
  }
}

TEST(Reduce, AwkwardLengthsAroundTheVectorWidth) {
  std::uint32_t seed = 100;
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32}) {
    for (std::int64_t n : testing::awkward_sizes()) {
      for (std::int64_t len : {n, n + 2048, n + 4096 + 1}) {
        const Tensor x = random_tensor({2, len}, dt, seed++);
        for (ReduceOp op : kAllOps) {
          if (!op_supports(op, dt)) continue;
          expect_matches_reference(op, x, {1}, false, fmt::format("op {} dtype {} len {}", static_cast<int>(op), dt, len));
        }
      }
    }
  }
}

TEST(Reduce, ColumnSumsOverOuterDims) {
  // Kept dims dense and innermost: the column-wise path (sum/mean), with row counts around its block.
  std::uint32_t seed = 500;
  for (DType dt : testing::compute_dtypes()) {
    for (std::int64_t rows : {2, 127, 128, 129, 300}) {
      const Tensor x = random_tensor({rows, 37}, dt, seed++);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
        if (!op_supports(op, dt)) continue;
        expect_matches_reference(op, x, {0}, false, fmt::format("{} rows {}", dt, rows));
        const Tensor y = random_tensor({3, rows, 2, 17}, dt, seed++);
        expect_matches_reference(op, y, {0, 1}, true, fmt::format("{} rows {} 4-D", dt, rows));
        expect_matches_reference(op, y, {1}, false, fmt::format("{} rows {} middle dim", dt, rows));
      }
    }
  }
  // Columns split differently over threads give the same bits.
  const Tensor x = random_tensor({1000, 3000}, DType::f32, 9);
  const int threads = num_threads();
  set_num_threads(1);
  const Tensor one = sum(x, {0});
  set_num_threads(2);
  const Tensor two = sum(x, {0});
  set_num_threads(threads);
  EXPECT_TRUE(same_bits(one, two));
  EXPECT_TRUE(all_close(one, reduce_reference(ReduceOp::sum, x, {0}, false), 1e-5, 1e-4));
}

TEST(Reduce, LongRowsSplitIntoChunksStayAccurateAndThreadIndependent) {
  // 2 rows of 300k: the chunked path. Values are positive so cancellation does not hide errors.
  const Tensor x = random_tensor({2, 300001}, DType::f32, 7, 0.0, 1.0);
  const Tensor ref = reduce_reference(ReduceOp::sum, x, {1}, false);
  const int threads = num_threads();
  set_num_threads(1);
  const Tensor one = sum(x, {1});
  const Tensor arg1 = argmax(x, 1);
  set_num_threads(2);
  const Tensor two = sum(x, {1});
  const Tensor arg2 = argmax(x, 1);
  set_num_threads(threads);
  EXPECT_TRUE(same_bits(one, two));
  EXPECT_TRUE(same_bits(arg1, arg2));
  EXPECT_TRUE(same_bits(arg1, reduce_reference(ReduceOp::argmax, x, {1}, false)));
  // Pairwise f32: relative error far below n * eps (which would be ~0.03).
  EXPECT_TRUE(all_close(one, ref, 1e-6, 0.0));
  const Tensor xb = x.to(DType::bf16);
  EXPECT_TRUE(all_close(sum(xb, {1}), reduce_reference(ReduceOp::sum, xb, {1}, false), 1.0 / 128, 0.0));
  EXPECT_TRUE(all_close(logsumexp(x, {1}), reduce_reference(ReduceOp::logsumexp, x, {1}, false), 1e-6, 0.0));
}

TEST(Reduce, OutputDTypesFollowTorch) {
  EXPECT_EQ(sum(Tensor::zeros({3}, DType::i32)).dtype(), DType::i64);
  EXPECT_EQ(sum(Tensor::zeros({3}, DType::boolean)).dtype(), DType::i64);
  EXPECT_EQ(sum(Tensor::zeros({3}, DType::u8)).dtype(), DType::i64);
  EXPECT_EQ(sum(Tensor::zeros({3}, DType::bf16)).dtype(), DType::bf16);
  EXPECT_EQ(amax(Tensor::zeros({3}, DType::i8)).dtype(), DType::i8);
  EXPECT_EQ(logsumexp(Tensor::zeros({3}, DType::i32), {0}).dtype(), DType::f32);
  EXPECT_EQ(argmax(Tensor::zeros({3}, DType::f16)).dtype(), DType::i64);
  EXPECT_EQ(sum(Tensor::zeros({2, 3}, DType::f32), {}).dim(), 0);
  EXPECT_EQ(mean(Tensor::zeros({2, 3}, DType::f32), {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmax(Tensor::zeros({2, 3}, DType::f32), std::nullopt, true).shape(), (Shape{1, 1}));
}

TEST(Reduce, LowPrecisionAccumulatesInF32) {
  // 4096 x 1.0 in bf16: accumulating in bf16 would stall at 256; f32 accumulation gives 4096 exactly.
  const Tensor x = Tensor::full({4096}, 1.0, DType::bf16);
  EXPECT_EQ(sum(x).item_as_double(), 4096.0);
  EXPECT_EQ(mean(x).item_as_double(), 1.0);
  const Tensor h = Tensor::full({8192}, 1.0, DType::f16);
  EXPECT_EQ(sum(h).item_as_double(), 8192.0);
}

TEST(Reduce, NaNPropagatesAndArgReturnsFirstNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t n : {5, 40}) {
    std::vector<float> v(static_cast<std::size_t>(n), 1.0f);
    v[2] = nan;
    v[3] = nan;
    v[4] = 9.0f;
    const Tensor x = Tensor::from_vector(v, {n});
    EXPECT_TRUE(std::isnan(amax(x).item_as_double()));
    EXPECT_TRUE(std::isnan(amin(x).item_as_double()));
    EXPECT_TRUE(std::isnan(sum(x).item_as_double()));
    EXPECT_TRUE(std::isnan(logsumexp(x, {0}).item_as_double()));
    EXPECT_EQ(argmax(x).item_as_double(), 2.0);
    EXPECT_EQ(argmin(x).item_as_double(), 2.0);
    const Tensor xb = x.to(DType::bf16);
    EXPECT_TRUE(std::isnan(amax(xb).item_as_double()));
    EXPECT_EQ(argmax(xb).item_as_double(), 2.0);
  }
}

TEST(Reduce, TiesGiveTheFirstIndex) {
  const Tensor x = Tensor::from_vector(std::vector<std::int32_t>{3, 7, 1, 7, 1}, {5});
  EXPECT_EQ(argmax(x).item_as_double(), 1.0);
  EXPECT_EQ(argmin(x).item_as_double(), 2.0);
}

TEST(Reduce, InfinitiesInLogsumexp) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(logsumexp(Tensor::from_vector(std::vector<float>{inf, 1.0f}, {2}), {0}).item_as_double(), inf);
  EXPECT_EQ(logsumexp(Tensor::from_vector(std::vector<float>{-inf, -inf}, {2}), {0}).item_as_double(), -inf);
  EXPECT_NEAR(logsumexp(Tensor::from_vector(std::vector<float>{-inf, 0.0f}, {2}), {0}).item_as_double(), 0.0, 1e-7);
  // Large values do not overflow: log(e^1000 + e^1000) = 1000 + log 2.
  EXPECT_NEAR(logsumexp(Tensor::from_vector(std::vector<float>{1000.0f, 1000.0f}, {2}), {0}).item_as_double(),
              1000.0 + std::log(2.0), 1e-3);
}

TEST(Reduce, EmptyInputs) {
  const Tensor e = Tensor::zeros({0, 3}, DType::f32);
  EXPECT_TRUE(same_bits(sum(e, {0}), Tensor::zeros({3}, DType::f32)));
  EXPECT_TRUE(std::isnan(mean(e, {0}).item_as_double({1})));
  EXPECT_EQ(logsumexp(e, {0}).item_as_double({2}), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
  EXPECT_EQ(amax(e, {1}).shape(), (Shape{0}));  // nothing reduced over zero elements: fine
  EXPECT_TRUE(throws_with([&] { (void)amax(e, {0}); }, {"amax", "non-empty", "[0, 3]"}));
  EXPECT_TRUE(throws_with([&] { (void)argmin(e, 0); }, {"argmin", "non-empty"}));
  EXPECT_EQ(sum(Tensor::zeros({0}, DType::i32)).item_as_double(), 0.0);
}

TEST(Reduce, ZeroDimInput) {
  const Tensor s = Tensor::full({}, 2.5, DType::f32);
  EXPECT_EQ(sum(s).item_as_double(), 2.5);
  EXPECT_EQ(amax(s, {0}).item_as_double(), 2.5);
  EXPECT_EQ(argmax(s).item_as_double(), 0.0);
}

TEST(Reduce, IntegerSumsWrapLikeTorch) {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const Tensor x = Tensor::from_vector(std::vector<std::int64_t>{big, 1}, {2});
  EXPECT_EQ(sum(x).to_vector<std::int64_t>()[0], std::numeric_limits<std::int64_t>::min());
}

TEST(Reduce, BadArgumentsThrowNamedErrors) {
  const Tensor x = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_TRUE(throws_with([&] { (void)mean(Tensor::zeros({3}, DType::i32)); }, {"mean", "input", "floating", "i32"}));
  EXPECT_TRUE(throws_with([&] { (void)sum(x, {1, -1}); }, {"sum", "dim", "more than once"}));
  EXPECT_TRUE(throws_with([&] { (void)sum(x, {2}); }, {"sum"}));
  EXPECT_TRUE(throws_with([&] { (void)argmax(Tensor::zeros({3}, DType::boolean)); }, {"argmax", "bool"}));
  EXPECT_TRUE(throws_with([&] { (void)sum(Tensor::zeros({3}, DType::f8_e4m3fn)); }, {"sum", "storage-only"}));
  EXPECT_TRUE(throws_with([&] { (void)sum(Tensor()); }, {"sum", "undefined"}));
}

}  // namespace
}  // namespace lmcore
