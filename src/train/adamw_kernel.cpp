// The AdamW update kernel (adamw_kernel.h), compiled once per SIMD target and dispatched at run time:
// one pass over p, g, m and v. The plain loop it replaces was compiled for baseline x86-64 (SSE2, a
// divide and a square root per four elements) and ran at 18 GB/s, a quarter of what streaming the four
// arrays allows; it took 3.6% of a default-model training step.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/train/adamw_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "lmcore/core/internal/hwy_tail-inl.h"
#include "lmcore/core/internal/simd_dispatch.h"
#include "src/train/adamw_kernel.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::train::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using internal::HWY_NAMESPACE::LoadTail;
using internal::HWY_NAMESPACE::StoreTail;

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
    // The tail through the same instructions on zero-padded vectors (LoadTail), so it gives the bits the
    // whole would; only its own elements are read and written. Not MaskedLoad: on the SSE targets that
    // reads the whole vector (HWY_MEM_OPS_MIGHT_FAULT), which faults where an array ends at an unmapped
    // page.
    VF pv = LoadTail(d, p, i, n, 0.0f), mv = LoadTail(d, m, i, n, 0.0f), vv = LoadTail(d, v, i, n, 0.0f);
    Update<kDecay>(c, pv, LoadTail(d, g, i, n, 0.0f), mv, vv);
    StoreTail(d, pv, p, i, n);
    StoreTail(d, mv, m, i, n);
    StoreTail(d, vv, v, i, n);
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
  LMCORE_DISPATCH(AdamWUpdate)(p, g, m, v, n, s, decay);
}

}  // namespace lmcore::train::detail
#endif
