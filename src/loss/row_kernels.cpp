// Highway implementations of row_kernels.h (the loss-only loops), one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/loss/row_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <limits>

#include "lmcore/core/internal/hwy_tail-inl.h"
#include "lmcore/core/internal/simd_dispatch.h"
#include "src/loss/row_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::loss_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

using internal::HWY_NAMESPACE::ExpNaN;
using internal::HWY_NAMESPACE::LoadTail;
using internal::HWY_NAMESPACE::StoreTail;

// x[j] = f(x[j]) * a - bw * (w ? w[j] : 1) with f = exp(. - lse) or the identity.
template <bool kExp>
void RowGrad(float* HWY_RESTRICT x, std::int64_t n, float lse, float a, float bw, const float* HWY_RESTRICT w) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const V vl = hn::Set(d, lse), va = hn::Set(d, a), vbw = hn::Set(d, bw);
  const auto f = [&](V v) {
    if constexpr (kExp) {
      return ExpNaN(d, hn::Sub(v, vl));  // x - lse <= 0; NaN stays NaN
    } else {
      return v;
    }
  };
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

HWY_EXPORT(RowSoftmaxGrad);
HWY_EXPORT(RowScaledGrad);

void row_softmax_grad_f32(float* x, std::int64_t n, float lse, float a, float bw, const float* w) {
  LMCORE_DISPATCH(RowSoftmaxGrad)(x, n, lse, a, bw, w);
}
void row_scaled_grad_f32(float* x, std::int64_t n, float scale, float bw, const float* w) {
  LMCORE_DISPATCH(RowScaledGrad)(x, n, scale, bw, w);
}

}  // namespace lmcore::loss_detail
#endif  // HWY_ONCE
