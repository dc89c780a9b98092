// Highway row kernels of the model's layers, compiled once per SIMD target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/model/layer_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "lmcore/core/internal/simd_dispatch.h"
#include "src/model/layer_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::model::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Sum of x^2 with two accumulators (FMA latency), then the lanes.
float RmsNormRow(float* HWY_RESTRICT out, const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, std::int64_t C,
                 float eps) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + 2 * N <= C; i += 2 * N) {
    const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
  }
  for (; i + N <= C; i += N) {
    const auto v = hn::LoadU(d, x + i);
    a0 = hn::MulAdd(v, v, a0);
  }
  float ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (; i < C; ++i) ss += x[i] * x[i];
  const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
  const auto r = hn::Set(d, rstd);
  i = 0;
  for (; i + N <= C; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), r), hn::LoadU(d, w + i)), d, out + i);
  for (; i < C; ++i) out[i] = x[i] * rstd * w[i];
  return rstd;
}

void RmsNormBackwardRow(float* HWY_RESTRICT dx, float* HWY_RESTRICT dw, const float* HWY_RESTRICT dy,
                        const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, float rstd, std::int64_t C) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  // dot = sum(w * dy * x)
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + 2 * N <= C; i += 2 * N) {
    a0 = hn::MulAdd(hn::Mul(hn::LoadU(d, w + i), hn::LoadU(d, dy + i)), hn::LoadU(d, x + i), a0);
    a1 = hn::MulAdd(hn::Mul(hn::LoadU(d, w + i + N), hn::LoadU(d, dy + i + N)), hn::LoadU(d, x + i + N), a1);
  }
  for (; i + N <= C; i += N) a0 = hn::MulAdd(hn::Mul(hn::LoadU(d, w + i), hn::LoadU(d, dy + i)), hn::LoadU(d, x + i), a0);
  float dot = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (; i < C; ++i) dot += w[i] * dy[i] * x[i];
  const float coef = rstd * rstd * rstd * dot / static_cast<float>(C);
  const auto r = hn::Set(d, rstd), c = hn::Set(d, coef);
  i = 0;
  for (; i + N <= C; i += N) {
    const auto vdy = hn::LoadU(d, dy + i), vx = hn::LoadU(d, x + i);
    // dx += r * w * dy - c * x
    const auto g = hn::Mul(hn::LoadU(d, w + i), vdy);
    hn::StoreU(hn::Add(hn::LoadU(d, dx + i), hn::NegMulAdd(c, vx, hn::Mul(r, g))), d, dx + i);
    hn::StoreU(hn::MulAdd(hn::Mul(vdy, vx), r, hn::LoadU(d, dw + i)), d, dw + i);
  }
  for (; i < C; ++i) {
    dx[i] += rstd * (w[i] * dy[i]) - coef * x[i];
    dw[i] += dy[i] * x[i] * rstd;
  }
}

void RopeHead(float* HWY_RESTRICT x, const float* HWY_RESTRICT cs, const float* HWY_RESTRICT sn, std::int64_t half,
              float sign) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  float* x1 = x;
  float* x2 = x + half;
  const auto sg = hn::Set(d, sign);
  std::int64_t i = 0;
  for (; i + N <= half; i += N) {
    const auto a = hn::LoadU(d, x1 + i), b = hn::LoadU(d, x2 + i);
    const auto c = hn::LoadU(d, cs + i), s = hn::Mul(sg, hn::LoadU(d, sn + i));
    hn::StoreU(hn::NegMulAdd(b, s, hn::Mul(a, c)), d, x1 + i);  // a c - b s
    hn::StoreU(hn::MulAdd(a, s, hn::Mul(b, c)), d, x2 + i);     // b c + a s
  }
  for (; i < half; ++i) {
    const float a = x1[i], b = x2[i], c = cs[i], s = sign * sn[i];
    x1[i] = a * c - b * s;
    x2[i] = b * c + a * s;
  }
}

template <class V>
HWY_INLINE V Sigmoid(DF d, V g) {
  // 1 / (1 + exp(-g)). Highway's Exp is valid up to +104: -g is clamped at 88 (exp(88) is still
  // finite, and the sigmoid there is below 1e-38 either way). A NaN g still gives NaN through the
  // products the callers form with g.
  return hn::Div(hn::Set(d, 1.0f), hn::Add(hn::Set(d, 1.0f), hn::Exp(d, hn::Min(hn::Neg(g), hn::Set(d, 88.0f)))));
}

float ScalarSigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

void SwigluRow(float* HWY_RESTRICT out, const float* HWY_RESTRICT g, const float* HWY_RESTRICT u, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto vg = hn::LoadU(d, g + i);
    hn::StoreU(hn::Mul(hn::Mul(vg, Sigmoid(d, vg)), hn::LoadU(d, u + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = g[i] * ScalarSigmoid(g[i]) * u[i];
}

void SwigluBackwardRow(float* HWY_RESTRICT dg, float* HWY_RESTRICT du, const float* HWY_RESTRICT dout,
                       const float* HWY_RESTRICT g, const float* HWY_RESTRICT u, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto vg = hn::LoadU(d, g + i), vu = hn::LoadU(d, u + i), vd = hn::LoadU(d, dout + i);
    const auto s = Sigmoid(d, vg);
    const auto silu = hn::Mul(vg, s);
    // silu'(g) = s * (1 + g * (1 - s))
    const auto dsilu = hn::Mul(s, hn::MulAdd(vg, hn::Sub(one, s), one));
    hn::StoreU(hn::Mul(hn::Mul(vd, vu), dsilu), d, dg + i);
    hn::StoreU(hn::Mul(vd, silu), d, du + i);
  }
  for (; i < n; ++i) {
    const float s = ScalarSigmoid(g[i]);
    dg[i] = dout[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
    du[i] = dout[i] * (g[i] * s);
  }
}

void AddRow(float* HWY_RESTRICT dst, const float* HWY_RESTRICT src, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, dst + i), hn::LoadU(d, src + i)), d, dst + i);
  for (; i < n; ++i) dst[i] += src[i];
}

// Sum of x^2 in f64: each group of f32 lanes widened to f64 (exact squares up to the f64 rounding of
// each product), four accumulators for the FMA latency, then the lanes and the tail in order.
double SumSquaresF64(const float* HWY_RESTRICT x, std::int64_t n) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> dh;  // as many f32 lanes as d has f64 lanes
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::PromoteTo(d, hn::LoadU(dh, x + i)), v1 = hn::PromoteTo(d, hn::LoadU(dh, x + i + N));
    const auto v2 = hn::PromoteTo(d, hn::LoadU(dh, x + i + 2 * N)), v3 = hn::PromoteTo(d, hn::LoadU(dh, x + i + 3 * N));
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
    a2 = hn::MulAdd(v2, v2, a2);
    a3 = hn::MulAdd(v3, v3, a3);
  }
  double s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace lmcore::model::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::model::detail {

HWY_EXPORT(RmsNormRow);
HWY_EXPORT(RmsNormBackwardRow);
HWY_EXPORT(RopeHead);
HWY_EXPORT(SwigluRow);
HWY_EXPORT(SwigluBackwardRow);
HWY_EXPORT(AddRow);
HWY_EXPORT(SumSquaresF64);

float rmsnorm_row(float* out, const float* x, const float* w, std::int64_t C, float eps) {
  return LMCORE_DISPATCH(RmsNormRow)(out, x, w, C, eps);
}
void rmsnorm_backward_row(float* dx, float* dw, const float* dy, const float* x, const float* w, float rstd,
                          std::int64_t C) {
  LMCORE_DISPATCH(RmsNormBackwardRow)(dx, dw, dy, x, w, rstd, C);
}
void rope_head(float* x, const float* cos, const float* sin, std::int64_t half, float sign) {
  LMCORE_DISPATCH(RopeHead)(x, cos, sin, half, sign);
}
void swiglu_row(float* out, const float* g, const float* u, std::int64_t n) {
  LMCORE_DISPATCH(SwigluRow)(out, g, u, n);
}
void swiglu_backward_row(float* dg, float* du, const float* dout, const float* g, const float* u, std::int64_t n) {
  LMCORE_DISPATCH(SwigluBackwardRow)(dg, du, dout, g, u, n);
}
void add_row(float* dst, const float* src, std::int64_t n) { LMCORE_DISPATCH(AddRow)(dst, src, n); }
double sum_squares_f64(const float* x, std::int64_t n) { return LMCORE_DISPATCH(SumSquaresF64)(x, n); }

}  // namespace lmcore::model::detail
#endif
