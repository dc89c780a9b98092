// Attention's own Highway row kernels (src/attention/row_kernels.h: the softmax gradient and the mask)
// on every SIMD target this CPU runs, on rows that begin or end at an unmapped page: a load or store
// past a row faults. Each must give the plain loop's result on every target: both are one multiply
// and subtract, or one select, per element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "src/attention/row_kernels.h"
#include "tests/common/random_values.h"
#include "tests/common/simd_targets.h"

namespace lmcore::attention {
namespace {

using lmcore::testing::Fence;
using lmcore::testing::for_each_simd_target;
using lmcore::testing::GuardedArray;
using lmcore::testing::normal_floats;

TEST(AttentionRowKernelsOnEveryTarget, SoftmaxGradientAndMaskStayInsideTheirRows) {
  for_each_simd_target([] {
    for (std::int64_t n : {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100})
      for (Fence fence : {Fence::before, Fence::after}) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << (fence == Fence::before ? ", fenced before" : ", fenced after"));
        const std::vector<float> p = normal_floats(n, 1), dp = normal_floats(n, 2);
        GuardedArray<float> gp(p, fence), gdp(dp, fence), gds(n, fence);
        const float delta = 0.375f;
        detail::row_softmax_grad(gds.data(), gp.data(), gdp.data(), n, delta);
        for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(gds.data()[j], p[j] * (dp[j] - delta)) << "ds at " << j;
        // In place (ds aliases dp), as the backward calls it.
        detail::row_softmax_grad(gdp.data(), gp.data(), gdp.data(), n, delta);
        for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(gdp.data()[j], p[j] * (dp[j] - delta)) << "ds in place at " << j;

        std::vector<std::uint8_t> mask(static_cast<std::size_t>(n));
        for (std::int64_t j = 0; j < n; ++j) mask[j] = static_cast<std::uint8_t>(j % 3 != 1);
        GuardedArray<std::uint8_t> gmask(mask, fence);
        GuardedArray<float> x(p, fence);
        detail::row_apply_mask(x.data(), gmask.data(), n);
        for (std::int64_t j = 0; j < n; ++j)
          ASSERT_EQ(x.data()[j], mask[j] ? p[j] : -std::numeric_limits<float>::infinity()) << "mask at " << j;
      }
  });
}

}  // namespace
}  // namespace lmcore::attention
