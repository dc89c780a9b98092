// Highway implementations of row_kernels.h, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/loss/row_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "src/loss/row_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::loss_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// The last n - j (< one vector) elements of x, the missing lanes set to `pad`, so that the tail goes
// through the same vector code (and rounding) as the body.
V LoadTail(D d, const float* HWY_RESTRICT x, std::int64_t j, std::int64_t n, float pad) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  const std::int64_t lanes = static_cast<std::int64_t>(hn::Lanes(d));
  for (std::int64_t i = 0; i < lanes; ++i) buf[i] = j + i < n ? x[j + i] : pad;
  return hn::Load(d, buf);
}

void StoreTail(D d, V v, float* HWY_RESTRICT x, std::int64_t j, std::int64_t n) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  hn::Store(v, d, buf);
  for (std::int64_t i = 0; j + i < n; ++i) x[j + i] = buf[i];
}

float RowMax(const float* HWY_RESTRICT x, std::int64_t n) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const float ninf = -std::numeric_limits<float>::infinity();
  auto acc = hn::Set(d, ninf);
  auto nan = hn::Zero(d);  // x - x: 0 for finite lanes, NaN for NaN (and inf) lanes
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const V v = hn::LoadU(d, x + j);
    acc = hn::Max(acc, v);
    nan = hn::Add(nan, hn::IfThenZeroElse(hn::IsInf(v), hn::Sub(v, v)));
  }
  if (j < n) {
    const V v = LoadTail(d, x, j, n, ninf);
    acc = hn::Max(acc, v);
    nan = hn::Add(nan, hn::IfThenZeroElse(hn::IsInf(v), hn::Sub(v, v)));
  }
  // x86 max drops a NaN operand; the separate sum is NaN exactly when some x[j] was NaN.
  const float m = hn::GetLane(hn::MaxOfLanes(d, acc));
  return std::isnan(hn::GetLane(hn::SumOfLanes(d, nan))) ? std::numeric_limits<float>::quiet_NaN() : m;
}

// sum_j exp(x[j] - m), and with kStore also x[j] = exp(x[j] - m). Two accumulators: the adds do not
// wait on each other behind the long exp.
template <bool kStore>
float ExpSum(std::conditional_t<kStore, float*, const float*> HWY_RESTRICT x, std::int64_t n, float m) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const V vm = hn::Set(d, m);
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  std::int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    const V e0 = hn::Exp(d, hn::Sub(hn::LoadU(d, x + j), vm));
    const V e1 = hn::Exp(d, hn::Sub(hn::LoadU(d, x + j + N), vm));
    if constexpr (kStore) {
      hn::StoreU(e0, d, x + j);
      hn::StoreU(e1, d, x + j + N);
    }
    s0 = hn::Add(s0, e0);
    s1 = hn::Add(s1, e1);
  }
  for (; j + N <= n; j += N) {
    const V e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + j), vm));
    if constexpr (kStore) hn::StoreU(e, d, x + j);
    s0 = hn::Add(s0, e);
  }
  if (j < n) {
    const V e = hn::Exp(d, hn::Sub(LoadTail(d, x, j, n, -std::numeric_limits<float>::infinity()), vm));
    if constexpr (kStore) StoreTail(d, e, x, j, n);
    s1 = hn::Add(s1, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

float RowExpSum(const float* HWY_RESTRICT x, std::int64_t n, float m) { return ExpSum<false>(x, n, m); }
float RowExpStoreSum(float* HWY_RESTRICT x, std::int64_t n, float m) { return ExpSum<true>(x, n, m); }

float RowWeightedSum(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, std::int64_t n) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  std::int64_t j = 0;
  if (w) {
    for (; j + N <= n; j += N) s0 = hn::MulAdd(hn::LoadU(d, w + j), hn::LoadU(d, x + j), s0);
    if (j < n) s1 = hn::Mul(LoadTail(d, w, j, n, 0.0f), LoadTail(d, x, j, n, 0.0f));
  } else {
    for (; j + N <= n; j += N) s0 = hn::Add(s0, hn::LoadU(d, x + j));
    if (j < n) s1 = LoadTail(d, x, j, n, 0.0f);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

// x[j] = f(x[j]) * a - bw * (w ? w[j] : 1) with f = exp(. - lse) or the identity.
template <bool kExp>
void RowGrad(float* HWY_RESTRICT x, std::int64_t n, float lse, float a, float bw, const float* HWY_RESTRICT w) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const V vl = hn::Set(d, lse), va = hn::Set(d, a), vbw = hn::Set(d, bw);
  const auto f = [&](V v) { return kExp ? hn::Exp(d, hn::Sub(v, vl)) : v; };
  std::int64_t j = 0;
  if (w) {
    for (; j + N <= n; j += N)
      hn::StoreU(hn::NegMulAdd(vbw, hn::LoadU(d, w + j), hn::Mul(f(hn::LoadU(d, x + j)), va)), d, x + j);
    if (j < n)
      StoreTail(d, hn::NegMulAdd(vbw, LoadTail(d, w, j, n, 0.0f), hn::Mul(f(LoadTail(d, x, j, n, 0.0f)), va)), x,
                j, n);
  } else {
    for (; j + N <= n; j += N) hn::StoreU(hn::Sub(hn::Mul(f(hn::LoadU(d, x + j)), va), vbw), d, x + j);
    if (j < n) StoreTail(d, hn::Sub(hn::Mul(f(LoadTail(d, x, j, n, 0.0f)), va), vbw), x, j, n);
  }
}

void RowSoftmaxGrad(float* x, std::int64_t n, float lse, float a, float bw, const float* w) {
  RowGrad<true>(x, n, lse, a, bw, w);
}

void RowScaledGrad(float* x, std::int64_t n, float scale, float bw, const float* w) {
  RowGrad<false>(x, n, 0.0f, scale, bw, w);
}

}  // namespace lmcore::loss_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::loss_detail {

HWY_EXPORT(RowMax);
HWY_EXPORT(RowExpSum);
HWY_EXPORT(RowExpStoreSum);
HWY_EXPORT(RowWeightedSum);
HWY_EXPORT(RowSoftmaxGrad);
HWY_EXPORT(RowScaledGrad);

float row_max_f32(const float* x, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMax)(x, n); }
float row_exp_sum_f32(const float* x, std::int64_t n, float m) { return HWY_DYNAMIC_DISPATCH(RowExpSum)(x, n, m); }
float row_exp_store_sum_f32(float* x, std::int64_t n, float m) {
  return HWY_DYNAMIC_DISPATCH(RowExpStoreSum)(x, n, m);
}
float row_weighted_sum_f32(const float* x, const float* w, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(RowWeightedSum)(x, w, n);
}
void row_softmax_grad_f32(float* x, std::int64_t n, float lse, float a, float bw, const float* w) {
  HWY_DYNAMIC_DISPATCH(RowSoftmaxGrad)(x, n, lse, a, bw, w);
}
void row_scaled_grad_f32(float* x, std::int64_t n, float scale, float bw, const float* w) {
  HWY_DYNAMIC_DISPATCH(RowScaledGrad)(x, n, scale, bw, w);
}

}  // namespace lmcore::loss_detail
#endif  // HWY_ONCE
