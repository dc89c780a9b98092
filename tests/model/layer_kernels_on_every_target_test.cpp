// The model's Highway row kernels (src/model/layer_kernels.h) on every SIMD target this CPU runs, on
// rows that begin or end at an unmapped page: a load or store past a row faults. On each target they
// must give the bits they give on ordinary vectors (their accuracy against the references is
// Layers.*, which the ctest variants simd_<capability>.model run on every target).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "src/model/layer_kernels.h"
#include "tests/common/random_values.h"
#include "tests/common/simd_targets.h"

namespace lmcore::model {
namespace {

using lmcore::testing::Fence;
using lmcore::testing::for_each_simd_target;
using lmcore::testing::GuardedArray;
using lmcore::testing::normal_floats;

using lmcore::testing::same_bits;

TEST(LayerKernelsOnEveryTarget, StayInsideTheirRowsAndGiveTheSameBits) {
  for_each_simd_target([] {
    for (std::int64_t n : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100})
      for (Fence fence : {Fence::before, Fence::after}) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << (fence == Fence::before ? ", fenced before" : ", fenced after"));
        const std::vector<float> x = normal_floats(n, 1), w = normal_floats(n, 2), dy = normal_floats(n, 3),
                                 u = normal_floats(n, 4);
        GuardedArray<float> gx(x, fence), gw(w, fence), gdy(dy, fence), gu(u, fence);

        std::vector<float> out(x.size());
        GuardedArray<float> gout(n, fence);
        const float rstd = detail::rmsnorm_row(out.data(), x.data(), w.data(), n, 1e-5f);
        EXPECT_EQ(detail::rmsnorm_row(gout.data(), gx.data(), gw.data(), n, 1e-5f), rstd);
        EXPECT_TRUE(same_bits(gout.to_vector(), out)) << "rmsnorm_row";

        std::vector<float> dx(x.size(), 0.5f), dw(x.size(), 0.25f);
        GuardedArray<float> gdx(dx, fence), gdw(dw, fence);
        detail::rmsnorm_backward_row(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd, n);
        detail::rmsnorm_backward_row(gdx.data(), gdw.data(), gdy.data(), gx.data(), gw.data(), rstd, n);
        EXPECT_TRUE(same_bits(gdx.to_vector(), dx)) << "rmsnorm_backward_row dx";
        EXPECT_TRUE(same_bits(gdw.to_vector(), dw)) << "rmsnorm_backward_row dw";

        // One head of 2n values rotated by n angles.
        std::vector<float> head = normal_floats(2 * n, 5), cs = normal_floats(n, 6), sn = normal_floats(n, 7);
        GuardedArray<float> ghead(head, fence), gcs(cs, fence), gsn(sn, fence);
        detail::rope_head(head.data(), cs.data(), sn.data(), n, -1.0f);
        detail::rope_head(ghead.data(), gcs.data(), gsn.data(), n, -1.0f);
        EXPECT_TRUE(same_bits(ghead.to_vector(), head)) << "rope_head";

        detail::swiglu_row(out.data(), x.data(), u.data(), n);
        detail::swiglu_row(gout.data(), gx.data(), gu.data(), n);
        EXPECT_TRUE(same_bits(gout.to_vector(), out)) << "swiglu_row";

        std::vector<float> dg(x.size()), du(x.size());
        GuardedArray<float> gdg(n, fence), gdu(n, fence);
        detail::swiglu_backward_row(dg.data(), du.data(), dy.data(), x.data(), u.data(), n);
        detail::swiglu_backward_row(gdg.data(), gdu.data(), gdy.data(), gx.data(), gu.data(), n);
        EXPECT_TRUE(same_bits(gdg.to_vector(), dg)) << "swiglu_backward_row dg";
        EXPECT_TRUE(same_bits(gdu.to_vector(), du)) << "swiglu_backward_row du";

        std::vector<float> acc = w;
        GuardedArray<float> gacc(w, fence);
        detail::add_row(acc.data(), x.data(), n);
        detail::add_row(gacc.data(), gx.data(), n);
        EXPECT_TRUE(same_bits(gacc.to_vector(), acc)) << "add_row";

        EXPECT_EQ(detail::sum_squares_f64(gx.data(), n), detail::sum_squares_f64(x.data(), n));
      }
  });
}

}  // namespace
}  // namespace lmcore::model
