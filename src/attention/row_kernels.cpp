// Highway implementations of row_kernels.h (the attention-only loops), one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/attention/row_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <limits>

#include "lmcore/core/internal/simd_dispatch.h"
#include "src/attention/row_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::attention::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RowSoftmaxGrad(float* ds, const float* p, const float* dp, std::int64_t n, float delta) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vd = hn::Set(d, delta);
  std::int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::Mul(hn::LoadU(d, p + j), hn::Sub(hn::LoadU(d, dp + j), vd)), d, ds + j);
  for (; j < n; ++j) ds[j] = p[j] * (dp[j] - delta);
}

void RowApplyMask(float* HWY_RESTRICT x, const std::uint8_t* HWY_RESTRICT mask, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<std::uint8_t, decltype(d)> d8;
  const hn::Rebind<std::int32_t, decltype(d)> di;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto ninf = hn::Set(d, -std::numeric_limits<float>::infinity());
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto keep = hn::RebindMask(d, hn::Ne(hn::PromoteTo(di, hn::LoadU(d8, mask + j)), hn::Zero(di)));
    hn::StoreU(hn::IfThenElse(keep, hn::LoadU(d, x + j), ninf), d, x + j);
  }
  for (; j < n; ++j) x[j] = mask[j] ? x[j] : -std::numeric_limits<float>::infinity();
}

}  // namespace lmcore::attention::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::attention::detail {

HWY_EXPORT(RowSoftmaxGrad);
HWY_EXPORT(RowApplyMask);

void row_softmax_grad(float* ds, const float* p, const float* dp, std::int64_t n, float delta) {
  LMCORE_DISPATCH(RowSoftmaxGrad)(ds, p, dp, n, delta);
}
void row_apply_mask(float* x, const std::uint8_t* mask, std::int64_t n) { LMCORE_DISPATCH(RowApplyMask)(x, mask, n); }

}  // namespace lmcore::attention::detail
#endif  // HWY_ONCE
