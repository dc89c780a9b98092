// The core's Highway kernels (dense reductions, the f32 <-> bf16/f16 casts, comparisons) on every SIMD
// target this CPU runs, on arrays that begin or end at an unmapped page: a load or store outside the
// array faults. Casts and comparisons must give the scalar loop's bits on every target; reductions
// (whose order of additions follows the vector width) must give, on each target, the bits they give
// on an ordinary vector, and a sum within its rounding bound of the exact one. The other tests of
// these kernels run on every target through the ctest variants simd_<capability>.core.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "lmcore/core/compare.h"
#include "lmcore/core/low_precision.h"
#include "src/core/cast_kernels.h"
#include "src/core/compare_kernels.h"
#include "src/core/reduce_kernels.h"
#include "tests/common/random_values.h"
#include "tests/common/simd_targets.h"

namespace lmcore {
namespace {

using testing::Fence;
using testing::for_each_simd_target;
using testing::GuardedArray;
using testing::uniform_floats;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Around every vector width (4, 8, 16 f32 lanes; 8, 16, 32 for 16-bit types), and past the reductions'
// block of 2048 elements into their pairwise combination.
std::vector<std::int64_t> lengths() {
  std::vector<std::int64_t> n = {0, 1, 2, 3, 5, 129, 1000, 2047, 2048, 2049, 4096 + 33, 3 * 2048 + 7};
  for (std::int64_t lanes : {4, 8, 16, 32})
    for (std::int64_t k : {lanes - 1, lanes, lanes + 1, 2 * lanes + 1, 4 * lanes + 3}) n.push_back(k);
  return n;
}

template <typename T>
std::vector<T> narrowed(const std::vector<float>& v) {
  std::vector<T> out;
  for (float x : v) out.push_back(T::from_f32(x));
  return out;
}

TEST(CoreKernelsOnEveryTarget, SumsAndExtremaStayInsideTheirRuns) {
  for_each_simd_target([] {
    for (std::int64_t n : lengths())
      for (Fence fence : {Fence::before, Fence::after}) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << (fence == Fence::before ? ", fenced before" : ", fenced after"));
        // Positive values: the exact sum is also the sum of magnitudes, so a sum 1% off is far out of bounds.
        const std::vector<float> v = uniform_floats(n, 7 + static_cast<std::uint32_t>(n), 0.5f, 1.5f);
        const std::vector<bf16> vb = narrowed<bf16>(v);
        const std::vector<f16> vh = narrowed<f16>(v);
        const std::vector<double> vd(v.begin(), v.end());
        GuardedArray<float> x(v, fence);
        GuardedArray<bf16> xb(vb, fence);
        GuardedArray<f16> xh(vh, fence);
        GuardedArray<double> xd(vd, fence);
        double exact = 0, exact_b = 0, exact_h = 0;
        for (std::int64_t i = 0; i < n; ++i) exact += v[i], exact_b += vb[i].to_f32(), exact_h += vh[i].to_f32();
        // Within a block of 2048, each of 4 accumulators per lane adds at most 512 terms (one lane); then
        // log2(n / 2048) pairwise levels: the worst case, about 3e-5 of the sum, far inside 1%.
        const double terms =
            static_cast<double>(std::min<std::int64_t>(n, 2048)) / 4 + std::log2(static_cast<double>(n) + 1) + 4;
        const double bound = terms * 0x1p-24 * exact;
        const float s = detail::reduce_sum_f32(x.data(), n);
        EXPECT_EQ(s, detail::reduce_sum_f32(v.data(), n));
        EXPECT_NEAR(s, exact, bound);
        EXPECT_EQ(detail::reduce_sum_bf16(xb.data(), n), detail::reduce_sum_bf16(vb.data(), n));
        EXPECT_NEAR(detail::reduce_sum_bf16(xb.data(), n), exact_b, bound);
        EXPECT_EQ(detail::reduce_sum_f16(xh.data(), n), detail::reduce_sum_f16(vh.data(), n));
        EXPECT_NEAR(detail::reduce_sum_f16(xh.data(), n), exact_h, bound);
        EXPECT_EQ(detail::reduce_sum_f64(xd.data(), n), detail::reduce_sum_f64(vd.data(), n));
        EXPECT_NEAR(detail::reduce_sum_f64(xd.data(), n), exact, 1e-12 * exact);
        if (n == 0) continue;
        double e = 0;
        for (std::int64_t i = 0; i < n; ++i) e += std::exp(static_cast<double>(v[i]) - 1.5);
        EXPECT_EQ(detail::reduce_sum_exp_f32(x.data(), n, 1.5f), detail::reduce_sum_exp_f32(v.data(), n, 1.5f));
        EXPECT_NEAR(detail::reduce_sum_exp_f32(x.data(), n, 1.5f), e, bound + 4 * 0x1p-24 * e);
        float mx = v[0], mn = v[0], mxb = vb[0].to_f32(), mnb = vb[0].to_f32();
        for (std::int64_t i = 1; i < n; ++i) {
          mx = std::max(mx, v[i]), mn = std::min(mn, v[i]);
          mxb = std::max(mxb, vb[i].to_f32()), mnb = std::min(mnb, vb[i].to_f32());
        }
        EXPECT_EQ(detail::reduce_max_f32(x.data(), n), mx);
        EXPECT_EQ(detail::reduce_min_f32(x.data(), n), mn);
        EXPECT_EQ(detail::reduce_max_bf16(xb.data(), n), mxb);
        EXPECT_EQ(detail::reduce_min_bf16(xb.data(), n), mnb);
        // A NaN in the last element, the tail's, propagates.
        GuardedArray<float> xn(v, fence);
        xn.data()[n - 1] = kNaN;
        EXPECT_TRUE(std::isnan(detail::reduce_max_f32(xn.data(), n)));
        EXPECT_TRUE(std::isnan(detail::reduce_min_f32(xn.data(), n)));
        EXPECT_TRUE(std::isnan(detail::reduce_sum_f32(xn.data(), n)));
      }
  });
}

// Values that exercise every rounding rule: ties to even, overflow to infinity, subnormals of both
// formats, NaN with payloads, signed zeros; and ordinary numbers of every magnitude.
std::vector<float> cast_inputs(std::int64_t n) {
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, 1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
                            65504.0f, 65520.0f, 3.4e38f, 0x1p-130f, -0x1p-140f, 0x1p-24f, 0x1p-25f, 6.1e-5f,
                            1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
  std::vector<float> v = uniform_floats(n, 99 + static_cast<std::uint32_t>(n), -1.0f, 1.0f);
  std::mt19937 rng(5);
  for (std::int64_t i = 0; i < n; ++i) {
    v[i] = std::ldexp(v[i], static_cast<int>(rng() % 60) - 30);
    if (i % 3 == 1) v[i] = specials[(i / 3) % (sizeof(specials) / sizeof(float))];
  }
  if (n > 0) v[n - 1] = kNaN;  // the tail's last element too
  return v;
}

TEST(CoreKernelsOnEveryTarget, CastsGiveTheScalarBitsAndStayInsideTheirArrays) {
  for_each_simd_target([] {
    for (std::int64_t n : lengths())
      for (Fence fence : {Fence::before, Fence::after}) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << (fence == Fence::before ? ", fenced before" : ", fenced after"));
        const std::vector<float> v = cast_inputs(n);
        GuardedArray<float> src(v, fence);
        GuardedArray<bf16> to_b(n, fence);
        GuardedArray<f16> to_h(n, fence);
        detail::cast_f32_to_bf16(to_b.data(), src.data(), n);
        detail::cast_f32_to_f16(to_h.data(), src.data(), n);
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(to_b.data()[i].bits, detail::cast_element<bf16>(v[i]).bits) << "f32 -> bf16 at " << i << ": " << v[i];
          ASSERT_EQ(to_h.data()[i].bits, detail::cast_element<f16>(v[i]).bits) << "f32 -> f16 at " << i << ": " << v[i];
        }
        GuardedArray<float> from_b(n, fence), from_h(n, fence);
        detail::cast_bf16_to_f32(from_b.data(), to_b.data(), n);
        detail::cast_f16_to_f32(from_h.data(), to_h.data(), n);
        for (std::int64_t i = 0; i < n; ++i) {
          const float wb = detail::cast_element<float>(to_b.data()[i]), wh = detail::cast_element<float>(to_h.data()[i]);
          ASSERT_EQ(std::memcmp(&from_b.data()[i], &wb, 4), 0) << "bf16 -> f32 at " << i;
          ASSERT_EQ(std::memcmp(&from_h.data()[i], &wh, 4), 0) << "f16 -> f32 at " << i;
        }
      }
  });
}

// The six operators as the standard library's function objects, indexed by CompareOp.
template <typename T>
bool scalar_compare(int op, T a, T b) {
  static const std::function<bool(T, T)> ops[6] = {std::equal_to<T>(), std::not_equal_to<T>(), std::less<T>(),
                                                    std::less_equal<T>(), std::greater<T>(), std::greater_equal<T>()};
  return ops[op](a, b);
}

template <typename T>
void expect_compare_on_fenced_runs(std::int64_t n, Fence fence, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<T> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      a[i] = static_cast<float>(static_cast<int>(rng() % 5) - 2), b[i] = static_cast<float>(static_cast<int>(rng() % 5) - 2);
      if (i % 7 == 3) a[i] = kNaN;
      if (i % 11 == 5) b[i] = kNaN;
    } else {
      a[i] = static_cast<T>(static_cast<int>(rng() % 5) - 2), b[i] = static_cast<T>(static_cast<int>(rng() % 5) - 2);
    }
  }
  GuardedArray<T> ga(a, fence), gb(b, fence);
  GuardedArray<bool> out(n, fence);
  const T scalar = b.empty() ? T{} : b[0];
  for (int op = 0; op < 6; ++op) {
    detail::compare_run(op, out.data(), ga.data(), gb.data(), 1, n);
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out.data()[i], scalar_compare(op, a[i], b[i])) << "op " << op << " at " << i;
    detail::compare_run(op, out.data(), ga.data(), &scalar, 0, n);
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out.data()[i], scalar_compare(op, a[i], scalar)) << "op " << op << " broadcast at " << i;
  }
}

TEST(CoreKernelsOnEveryTarget, ComparisonsGiveTheScalarResultsAndStayInsideTheirArrays) {
  for_each_simd_target([] {
    for (std::int64_t n : lengths())
      for (Fence fence : {Fence::before, Fence::after}) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << (fence == Fence::before ? ", fenced before" : ", fenced after"));
        const auto seed = static_cast<std::uint32_t>(n);
        expect_compare_on_fenced_runs<float>(n, fence, seed);
        expect_compare_on_fenced_runs<std::int32_t>(n, fence, seed);
        expect_compare_on_fenced_runs<std::int16_t>(n, fence, seed);
        expect_compare_on_fenced_runs<std::int8_t>(n, fence, seed);
        expect_compare_on_fenced_runs<std::uint8_t>(n, fence, seed);
      }
  });
}

}  // namespace
}  // namespace lmcore
