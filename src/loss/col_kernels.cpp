// Highway implementations of col_kernels.h, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/loss/col_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "lmcore/core/internal/hwy_tail-inl.h"
#include "lmcore/core/internal/simd_dispatch.h"
#include "src/loss/col_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::loss_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

using internal::HWY_NAMESPACE::ExpNaN;
using internal::HWY_NAMESPACE::LoadTail;
using internal::HWY_NAMESPACE::StoreTail;

// cnt of a vector's lanes at x (a whole vector, or a tail padded with `pad`).
HWY_INLINE V Load(D d, const float* HWY_RESTRICT x, std::int64_t cnt, std::int64_t lanes, float pad) {
  return cnt == lanes ? hn::LoadU(d, x) : LoadTail(d, x, 0, cnt, pad);
}

HWY_INLINE void Store(D d, V v, float* HWY_RESTRICT x, std::int64_t cnt, std::int64_t lanes) {
  if (cnt == lanes) hn::StoreU(v, d, x);
  else StoreTail(d, v, x, 0, cnt);
}

// Every loop walks the tile row by row (contiguous, prefetchable) and keeps its per-column state in
// small arrays of n floats that stay in L1/L2; walking a column group down all the rows instead would
// touch a new page per row.

// exp(a - b), but 1 where a == b: the factor that moves a sum of exps taken against the max a to the
// max b (a <= b), without exp(-inf + inf) = NaN when both are -inf.
HWY_INLINE V Rebase(D d, V a, V b) { return hn::IfThenElse(hn::Eq(a, b), hn::Set(d, 1.0f), ExpNaN(d, hn::Sub(a, b))); }

void ColExpStoreSumOnline(float* HWY_RESTRICT z, std::int64_t rows, std::int64_t n, float* HWY_RESTRICT m,
                          float* HWY_RESTRICT s, const float* HWY_RESTRICT w, float* HWY_RESTRICT wz,
                          float* HWY_RESTRICT block_m) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const float ninf = -std::numeric_limits<float>::infinity();
  const V vninf = hn::Set(d, ninf);
  std::vector<float> bm(static_cast<std::size_t>(n)), part(static_cast<std::size_t>(n));
  for (std::int64_t r0 = 0, b = 0; r0 < rows; r0 += kColBlock, ++b) {
    const std::int64_t r1 = std::min(rows, r0 + kColBlock);
    // 1. The block's max per column (NaN kept as in ColMax) and, with label smoothing, its weighted sum.
    std::fill(bm.begin(), bm.end(), ninf);
    std::fill(part.begin(), part.end(), 0.0f);
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* row = z + r * n;
      const V wr = hn::Set(d, w ? w[r] : 1.0f);
      for (std::int64_t j = 0; j < n; j += N) {
        const std::int64_t cnt = std::min(N, n - j);
        const V x = Load(d, row + j, cnt, N, ninf), acc = Load(d, bm.data() + j, cnt, N, ninf);
        const auto nan = hn::Or(hn::IsNaN(x), hn::IsNaN(acc));
        Store(d, hn::IfThenElse(nan, hn::Add(acc, x), hn::Max(acc, x)), bm.data() + j, cnt, N);
        if (wz) Store(d, hn::MulAdd(wr, Load(d, row + j, cnt, N, 0.0f), Load(d, part.data() + j, cnt, N, 0.0f)),
                      part.data() + j, cnt, N);
      }
    }
    // 2. The running max takes the block's; the sum so far moves to it (only where it grew, so a
    //    column of -inf so far stays 0 instead of 0 * NaN).
    for (std::int64_t j = 0; j < n; j += N) {
      const std::int64_t cnt = std::min(N, n - j);
      const V mo = Load(d, m + j, cnt, N, ninf), bj = Load(d, bm.data() + j, cnt, N, ninf);
      const auto nan = hn::Or(hn::IsNaN(mo), hn::IsNaN(bj));
      const V mn = hn::IfThenElse(nan, hn::Add(mo, bj), hn::Max(mo, bj));
      const auto grew = hn::Or(hn::Gt(bj, mo), hn::IsNaN(bj));
      const V so = Load(d, s + j, cnt, N, 0.0f);
      Store(d, hn::IfThenElse(grew, hn::Mul(so, ExpNaN(d, hn::Sub(mo, mn))), so), s + j, cnt, N);
      Store(d, mn, m + j, cnt, N);
      Store(d, mn, block_m + b * n + j, cnt, N);
      if (wz) Store(d, hn::Add(Load(d, wz + j, cnt, N, 0.0f), Load(d, part.data() + j, cnt, N, 0.0f)), wz + j, cnt, N);
    }
    // 3. exp against the running max, stored, and summed. A -inf logit gives 0 even while the max is
    //    still -inf (exp(-inf + inf) would be NaN; with one max over all rows it is 0 unless the whole
    //    column is -inf).
    std::fill(part.begin(), part.end(), 0.0f);
    for (std::int64_t r = r0; r < r1; ++r) {
      float* row = z + r * n;
      for (std::int64_t j = 0; j < n; j += N) {
        const std::int64_t cnt = std::min(N, n - j);
        const V x = Load(d, row + j, cnt, N, ninf);
        const V e = hn::IfThenZeroElse(hn::Eq(x, vninf), ExpNaN(d, hn::Sub(x, Load(d, m + j, cnt, N, 0.0f))));
        Store(d, e, row + j, cnt, N);
        Store(d, hn::Add(Load(d, part.data() + j, cnt, N, 0.0f), e), part.data() + j, cnt, N);
      }
    }
    for (std::int64_t j = 0; j < n; ++j) s[j] += part[static_cast<std::size_t>(j)];
  }
}

void ColRebase(std::int64_t n, const float* HWY_RESTRICT from, const float* HWY_RESTRICT to,
               float* HWY_RESTRICT factor) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  for (std::int64_t j = 0; j < n; j += N) {
    const std::int64_t cnt = std::min(N, n - j);
    Store(d, Rebase(d, Load(d, from + j, cnt, N, 0.0f), Load(d, to + j, cnt, N, 0.0f)), factor + j, cnt, N);
  }
}

// f32 -> bf16 bits, to nearest even, NaN -> 0xFFFF (cast_f32_to_lowp's rule), in the low 16 bits.
template <class DU>
HWY_INLINE hn::Vec<DU> Bf16Bits(DU du, V v) {
  const auto u = hn::BitCast(du, v);
  const auto rounded =
      hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)))));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Set(du, 0xFFFFu), rounded);
}

// e and out may share memory (out == e as bytes: see col_kernels.h), so neither is restrict: each
// vector of e is loaded before anything is stored over it.
void ColGradToBF16(const float* e, std::int64_t rows, std::int64_t n, std::int64_t row0, const ColGrad& g,
                   std::uint16_t* out, float* HWY_RESTRICT db) {
  const D d;
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::uint16_t, D> du16;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  // With block_m: the exps of block b were taken against block_m[b], so scale becomes
  // scale * exp(block_m[b] - m) at each block's first row.
  std::vector<float> bscale(g.block_m ? static_cast<std::size_t>(n) : 0);
  const float* scale = g.scale;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (g.block_m && r % kColBlock == 0) {
      const float* from = g.block_m + (r / kColBlock) * n;
      for (std::int64_t j = 0; j < n; j += N) {
        const std::int64_t cnt = std::min(N, n - j);
        const V f = Rebase(d, Load(d, from + j, cnt, N, 0.0f), Load(d, g.m + j, cnt, N, 0.0f));
        Store(d, hn::Mul(Load(d, g.scale + j, cnt, N, 0.0f), f), bscale.data() + j, cnt, N);
      }
      scale = bscale.data();
    }
    const float* er = e + r * n;
    std::uint16_t* orow = out + r * n;
    const auto vrow = hn::Set(di, static_cast<std::int32_t>(row0 + r));
    const V wr = hn::Set(d, g.w ? g.w[r] : 1.0f);
    V sum = hn::Zero(d);
    for (std::int64_t j = 0; j < n; j += N) {
      const std::int64_t cnt = std::min(N, n - j);
      V x = hn::Mul(Load(d, er + j, cnt, N, 0.0f), Load(d, scale + j, cnt, N, 0.0f));
      if (g.bw) x = hn::NegMulAdd(Load(d, g.bw + j, cnt, N, 0.0f), wr, x);
      // The target's column: minus bt (target -1, and the padded lanes, match no row).
      HWY_ALIGN std::int32_t tpad[hn::MaxLanes(di)];
      const std::int32_t* tj = g.target + j;
      if (cnt < N) {
        for (std::int64_t i = 0; i < N; ++i) tpad[i] = i < cnt ? g.target[j + i] : -1;
        tj = tpad;
      }
      const auto hit = hn::RebindMask(d, hn::Eq(hn::LoadU(di, tj), vrow));
      x = hn::IfThenElse(hit, hn::Sub(x, Load(d, g.bt + j, cnt, N, 0.0f)), x);
      x = hn::IfThenElseZero(hn::Ne(Load(d, g.keep + j, cnt, N, 0.0f), hn::Zero(d)), x);
      sum = hn::Add(sum, x);
      const auto bits = hn::TruncateTo(du16, Bf16Bits(du, x));
      if (cnt == N) {
        hn::StoreU(bits, du16, orow + j);
      } else {
        HWY_ALIGN std::uint16_t buf[hn::MaxLanes(du16)];
        hn::Store(bits, du16, buf);
        for (std::int64_t i = 0; i < cnt; ++i) orow[j + i] = buf[i];
      }
    }
    if (db) db[r] += hn::GetLane(hn::SumOfLanes(d, sum));
  }
}

}  // namespace lmcore::loss_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::loss_detail {

HWY_EXPORT(ColGradToBF16);
HWY_EXPORT(ColExpStoreSumOnline);
HWY_EXPORT(ColRebase);

void col_exp_store_sum_online_f32(float* z, std::int64_t rows, std::int64_t n, float* m, float* s, const float* w,
                                  float* wz, float* block_m) {
  LMCORE_DISPATCH(ColExpStoreSumOnline)(z, rows, n, m, s, w, wz, block_m);
}
void col_rebase_f32(std::int64_t n, const float* from, const float* to, float* factor) {
  LMCORE_DISPATCH(ColRebase)(n, from, to, factor);
}

void col_grad_to_bf16(const float* e, std::int64_t rows, std::int64_t n, std::int64_t row0, const ColGrad& g,
                      bf16* out, float* db) {
  LMCORE_DISPATCH(ColGradToBF16)(e, rows, n, row0, g, reinterpret_cast<std::uint16_t*>(out), db);
}

}  // namespace lmcore::loss_detail
#endif  // HWY_ONCE
