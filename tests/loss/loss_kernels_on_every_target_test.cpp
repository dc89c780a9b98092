// The losses' Highway kernels (src/loss/row_kernels.h, col_kernels.h) on every SIMD target this CPU
// runs, on arrays that begin or end at an unmapped page: the logits, the per-token and per-row arrays
// and the bf16 output each fenced, so a load or store past any of them faults. On each target they
// must give the bits they give on ordinary vectors (their accuracy against the definitions is
// LossRowKernels.* and LossColKernels.*, which the ctest variants simd_<capability>.loss run on every
// target).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "lmcore/core/low_precision.h"
#include "src/loss/col_kernels.h"
#include "src/loss/row_kernels.h"
#include "tests/common/random_values.h"
#include "tests/common/simd_targets.h"

namespace lmcore {
namespace {

using testing::Fence;
using testing::for_each_simd_target;
using testing::GuardedArray;
using testing::normal_floats;

using testing::same_bits;

const char* fence_name(Fence f) { return f == Fence::before ? ", fenced before" : ", fenced after"; }

TEST(LossKernelsOnEveryTarget, RowGradientsStayInsideTheirRows) {
  for_each_simd_target([] {
    for (std::int64_t n : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100})
      for (Fence fence : {Fence::before, Fence::after})
        for (bool weighted : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "n = " << n << fence_name(fence) << (weighted ? ", weighted" : ""));
          const std::vector<float> z = normal_floats(n, 1), w = normal_floats(n, 2, 1.0f);
          GuardedArray<float> gw(w, fence);
          std::vector<float> want = z;
          GuardedArray<float> got(z, fence);
          loss_detail::row_softmax_grad_f32(want.data(), n, 2.5f, 0.5f, 0.01f, weighted ? w.data() : nullptr);
          loss_detail::row_softmax_grad_f32(got.data(), n, 2.5f, 0.5f, 0.01f, weighted ? gw.data() : nullptr);
          EXPECT_TRUE(same_bits(got.to_vector(), want)) << "row_softmax_grad_f32";
          want = z;
          GuardedArray<float> got2(z, fence);
          loss_detail::row_scaled_grad_f32(want.data(), n, 0.3f, 0.01f, weighted ? w.data() : nullptr);
          loss_detail::row_scaled_grad_f32(got2.data(), n, 0.3f, 0.01f, weighted ? gw.data() : nullptr);
          EXPECT_TRUE(same_bits(got2.to_vector(), want)) << "row_scaled_grad_f32";
        }
  });
}

// The column loops over a tile zT [rows, n], with every array fenced: the tile, the per-column state
// (m, s, wz, block_m, the ColGrad vectors) and the per-row arrays (w, db).
TEST(LossKernelsOnEveryTarget, ColumnLoopsStayInsideTheirArrays) {
  for_each_simd_target([] {
    for (std::int64_t rows : {1, 64, 65, 130})
      for (std::int64_t n : {1, 3, 15, 16, 17, 33})
        for (Fence fence : {Fence::before, Fence::after}) {
          SCOPED_TRACE(::testing::Message() << "rows = " << rows << ", n = " << n << fence_name(fence));
          const std::int64_t blocks = (rows + loss_detail::kColBlock - 1) / loss_detail::kColBlock;
          const std::vector<float> z = normal_floats(rows * n, 3, 2.0f), w = normal_floats(rows, 4, 1.0f);
          const auto state = [&](float v) { return std::vector<float>(static_cast<std::size_t>(n), v); };
          constexpr float kNinf = -std::numeric_limits<float>::infinity();
          // Ordinary vectors first.
          std::vector<float> e = z, m = state(kNinf), s = state(0.0f), wz = state(0.0f);
          std::vector<float> block_m(static_cast<std::size_t>(blocks * n));
          loss_detail::col_exp_store_sum_online_f32(e.data(), rows, n, m.data(), s.data(), w.data(), wz.data(),
                                                    block_m.data());
          // The same on fenced arrays.
          GuardedArray<float> ge(z, fence), gm(state(kNinf), fence), gs(state(0.0f), fence), gwz(state(0.0f), fence);
          GuardedArray<float> gw(w, fence), gblock_m(blocks * n, fence);
          loss_detail::col_exp_store_sum_online_f32(ge.data(), rows, n, gm.data(), gs.data(), gw.data(), gwz.data(),
                                                    gblock_m.data());
          EXPECT_TRUE(same_bits(ge.to_vector(), e)) << "exps";
          EXPECT_TRUE(same_bits(gm.to_vector(), m)) << "max";
          EXPECT_TRUE(same_bits(gs.to_vector(), s)) << "sum";
          EXPECT_TRUE(same_bits(gwz.to_vector(), wz)) << "weighted sum";
          EXPECT_TRUE(same_bits(gblock_m.to_vector(), block_m)) << "block max";

          std::vector<float> to = m, factor(static_cast<std::size_t>(n));
          for (float& t : to) t += 0.5f;
          GuardedArray<float> gto(to, fence), gfactor(n, fence);
          loss_detail::col_rebase_f32(n, m.data(), to.data(), factor.data());
          loss_detail::col_rebase_f32(n, gm.data(), gto.data(), gfactor.data());
          EXPECT_TRUE(same_bits(gfactor.to_vector(), factor)) << "col_rebase_f32";

          std::vector<float> scale(static_cast<std::size_t>(n)), bw = state(0.002f), bt = state(0.7f), keep = state(1.0f);
          std::vector<std::int32_t> target(static_cast<std::size_t>(n));
          for (std::int64_t j = 0; j < n; ++j) {
            scale[j] = 0.5f / s[j];
            target[j] = static_cast<std::int32_t>((j * 37) % rows);
            if (j % 5 == 4) keep[j] = 0.0f;
          }
          GuardedArray<float> gscale(scale, fence), gbw(bw, fence), gbt(bt, fence), gkeep(keep, fence);
          GuardedArray<std::int32_t> gtarget(target, fence);
          const auto grad = [&](bool fenced) {
            loss_detail::ColGrad g;
            g.scale = fenced ? gscale.data() : scale.data();
            g.bw = fenced ? gbw.data() : bw.data();
            g.w = fenced ? gw.data() : w.data();
            g.bt = fenced ? gbt.data() : bt.data();
            g.target = fenced ? gtarget.data() : target.data();
            g.keep = fenced ? gkeep.data() : keep.data();
            g.block_m = fenced ? gblock_m.data() : block_m.data();
            g.m = fenced ? gm.data() : m.data();
            return g;
          };
          std::vector<bf16> out(static_cast<std::size_t>(rows * n));
          std::vector<float> db(static_cast<std::size_t>(rows), 0.25f);
          loss_detail::col_grad_to_bf16(e.data(), rows, n, 0, grad(false), out.data(), db.data());
          GuardedArray<bf16> gout(rows * n, fence);
          GuardedArray<float> gdb(std::vector<float>(static_cast<std::size_t>(rows), 0.25f), fence);
          loss_detail::col_grad_to_bf16(ge.data(), rows, n, 0, grad(true), gout.data(), gdb.data());
          EXPECT_TRUE(same_bits(gout.to_vector(), out)) << "bf16 d_logits";
          EXPECT_TRUE(same_bits(gdb.to_vector(), db)) << "d_bias";
        }
  });
}

}  // namespace
}  // namespace lmcore
