// The AdamW update kernel (adamw_kernel.h), compiled once per SIMD target and dispatched at run time:
// one pass over p, g, m and v. The plain loop it replaces was compiled for baseline x86-64 (SSE2, a
// divide and a square root per four elements) and ran at 18 GB/s, a quarter of what streaming the four
// arrays allows; it took 3.6% of a default-model training step.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/train/adamw_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "src/train/adamw_kernel.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::train::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

struct Consts {
  explicit Consts(DF d, const AdamWScalars& s)
      : decay_scale(hn::Set(d, s.decay_scale)), b1(hn::Set(d, s.beta1)), omb1(hn::Set(d, s.one_minus_beta1)),
        b2(hn::Set(d, s.beta2)), omb2(hn::Set(d, s.one_minus_beta2)), neg_step(hn::Set(d, -s.step_size)),
        bc2_sqrt(hn::Set(d, s.bias_correction2_sqrt)), eps(hn::Set(d, s.eps)) {}
  VF decay_scale, b1, omb1, b2, omb2, neg_step, bc2_sqrt, eps;
};

// Each operation rounds as torch's separate tensor ops do: mul, then add; sqrt, div, add; div, mul, add
// (this file is compiled with -ffp-contract=off, so no target fuses a multiply and an add).
template <bool kDecay>
HWY_INLINE void Update(const Consts& c, VF& p, VF g, VF& m, VF& v) {
  if (kDecay) p = hn::Mul(p, c.decay_scale);
  m = hn::Add(hn::Mul(m, c.b1), hn::Mul(g, c.omb1));
  v = hn::Add(hn::Mul(v, c.b2), hn::Mul(hn::Mul(c.omb2, g), g));
  const VF denom = hn::Add(hn::Div(hn::Sqrt(v), c.bc2_sqrt), c.eps);
  p = hn::Add(p, hn::Mul(c.neg_step, hn::Div(m, denom)));
}

template <bool kDecay>
void UpdateRange(float* HWY_RESTRICT p, const float* HWY_RESTRICT g, float* HWY_RESTRICT m, float* HWY_RESTRICT v,
                 std::int64_t n, const AdamWScalars& s) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const Consts c(d, s);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    VF pv = hn::LoadU(d, p + i), mv = hn::LoadU(d, m + i), vv = hn::LoadU(d, v + i);
    Update<kDecay>(c, pv, hn::LoadU(d, g + i), mv, vv);
    hn::StoreU(pv, d, p + i);
    hn::StoreU(mv, d, m + i);
    hn::StoreU(vv, d, v + i);
  }
  if (i < n) {
    // The tail through the same instructions on full vectors staged on the stack (zeros past the end,
    // whose lanes are computed and dropped), so it gives the bits the whole would. Not MaskedLoad: on
    // the SSE targets that reads the whole vector (HWY_MEM_OPS_MIGHT_FAULT) and can fault where an
    // array ends at an unmapped page.
    const std::size_t rest = static_cast<std::size_t>(n - i);
    HWY_ALIGN float tp[HWY_MAX_BYTES / sizeof(float)] = {}, tg[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float tm[HWY_MAX_BYTES / sizeof(float)] = {}, tv[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(tp, p + i, rest * sizeof(float));
    std::memcpy(tg, g + i, rest * sizeof(float));
    std::memcpy(tm, m + i, rest * sizeof(float));
    std::memcpy(tv, v + i, rest * sizeof(float));
    VF pv = hn::Load(d, tp), mv = hn::Load(d, tm), vv = hn::Load(d, tv);
    Update<kDecay>(c, pv, hn::Load(d, tg), mv, vv);
    hn::Store(pv, d, tp);
    hn::Store(mv, d, tm);
    hn::Store(vv, d, tv);
    std::memcpy(p + i, tp, rest * sizeof(float));
    std::memcpy(m + i, tm, rest * sizeof(float));
    std::memcpy(v + i, tv, rest * sizeof(float));
  }
}

void AdamWUpdate(float* HWY_RESTRICT p, const float* HWY_RESTRICT g, float* HWY_RESTRICT m, float* HWY_RESTRICT v,
                 std::int64_t n, const AdamWScalars& s, bool decay) {
  if (decay) UpdateRange<true>(p, g, m, v, n, s);
  else UpdateRange<false>(p, g, m, v, n, s);
}

}  // namespace lmcore::train::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::train::detail {

HWY_EXPORT(AdamWUpdate);

void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamWScalars& s, bool decay) {
  HWY_DYNAMIC_DISPATCH(AdamWUpdate)(p, g, m, v, n, s, decay);
}

}  // namespace lmcore::train::detail
#endif
