// Highway implementations of row_kernels.h, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/attention/row_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

#include "src/attention/row_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::attention::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float RowMax(const float* HWY_RESTRICT x, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto acc = hn::Set(d, -std::numeric_limits<float>::infinity());
  std::int64_t j = 0;
  for (; j + N <= n; j += N) acc = hn::Max(acc, hn::LoadU(d, x + j));
  float m = hn::GetLane(hn::MaxOfLanes(d, acc));
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

float RowExpSum(float* HWY_RESTRICT x, std::int64_t n, float m) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  auto sum = hn::Zero(d);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + j), vm));
    hn::StoreU(e, d, x + j);
    sum = hn::Add(sum, e);
  }
  if (j < n) {
    // The tail through a zero-padded lane buffer, so it rounds like the body.
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    for (std::int64_t i = 0; i < N; ++i) buf[i] = j + i < n ? x[j + i] : -std::numeric_limits<float>::infinity();
    const auto e = hn::Exp(d, hn::Sub(hn::Load(d, buf), vm));
    hn::Store(e, d, buf);
    sum = hn::Add(sum, e);
    for (std::int64_t i = 0; j + i < n; ++i) x[j + i] = buf[i];
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

void RowExp(float* HWY_RESTRICT x, std::int64_t n, float m) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Exp(d, hn::Sub(hn::LoadU(d, x + j), vm)), d, x + j);
  if (j < n) {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    for (std::int64_t i = 0; i < N; ++i) buf[i] = j + i < n ? x[j + i] : -std::numeric_limits<float>::infinity();
    hn::Store(hn::Exp(d, hn::Sub(hn::Load(d, buf), vm)), d, buf);
    for (std::int64_t i = 0; j + i < n; ++i) x[j + i] = buf[i];
  }
}

void RowSoftmaxGrad(float* ds, const float* p, const float* dp, std::int64_t n, float delta) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vd = hn::Set(d, delta);
  std::int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::Mul(hn::LoadU(d, p + j), hn::Sub(hn::LoadU(d, dp + j), vd)), d, ds + j);
  for (; j < n; ++j) ds[j] = p[j] * (dp[j] - delta);
}

void RowScale(float* HWY_RESTRICT x, std::int64_t n, float a) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), va), d, x + j);
  for (; j < n; ++j) x[j] *= a;
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

HWY_EXPORT(RowMax);
HWY_EXPORT(RowExpSum);
HWY_EXPORT(RowExp);
HWY_EXPORT(RowSoftmaxGrad);
HWY_EXPORT(RowScale);
HWY_EXPORT(RowApplyMask);

float row_max(const float* x, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMax)(x, n); }
float row_exp_sum(float* x, std::int64_t n, float m) { return HWY_DYNAMIC_DISPATCH(RowExpSum)(x, n, m); }
void row_exp(float* x, std::int64_t n, float m) { HWY_DYNAMIC_DISPATCH(RowExp)(x, n, m); }
void row_softmax_grad(float* ds, const float* p, const float* dp, std::int64_t n, float delta) {
  HWY_DYNAMIC_DISPATCH(RowSoftmaxGrad)(ds, p, dp, n, delta);
}
void row_scale(float* x, std::int64_t n, float a) { HWY_DYNAMIC_DISPATCH(RowScale)(x, n, a); }
void row_apply_mask(float* x, const std::uint8_t* mask, std::int64_t n) { HWY_DYNAMIC_DISPATCH(RowApplyMask)(x, mask, n); }

}  // namespace lmcore::attention::detail
#endif  // HWY_ONCE
