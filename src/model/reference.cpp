#include "lmcore/model/reference.h"

#include <cmath>
#include <vector>

namespace lmcore::model::reference {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, std::int64_t N, std::int64_t C,
                     float eps) {
  for (std::int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (std::int64_t i = 0; i < C; ++i) ss += static_cast<double>(inp[n * C + i]) * inp[n * C + i];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    rstd[n] = static_cast<float>(r);
    for (std::int64_t i = 0; i < C; ++i) out[n * C + i] = static_cast<float>(inp[n * C + i] * r * weight[i]);
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, std::int64_t N, std::int64_t C) {
  std::vector<double> dw(static_cast<std::size_t>(C), 0.0);
  for (std::int64_t n = 0; n < N; ++n) {
    const double r = rstd[n];
    double dot = 0;
    for (std::int64_t i = 0; i < C; ++i) dot += static_cast<double>(weight[i]) * dout[n * C + i] * inp[n * C + i];
    for (std::int64_t i = 0; i < C; ++i) {
      const double x = inp[n * C + i], dy = dout[n * C + i];
      dinp[n * C + i] += static_cast<float>(r * weight[i] * dy - r * r * r * dot / static_cast<double>(C) * x);
      dw[i] += dy * x * r;
    }
  }
  for (std::int64_t i = 0; i < C; ++i) dweight[i] += static_cast<float>(dw[i]);
}

namespace {
void rotate(float* x, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
            std::int64_t head_dim, double theta, double sign) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t n = 0; n < N; ++n) {
    const double t = static_cast<double>(n % T);
    for (std::int64_t h = 0; h < n_heads; ++h) {
      float* v = x + n * row_stride + h * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle = t * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        const double c = std::cos(angle), s = sign * std::sin(angle);
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}
}  // namespace

void rope_forward(float* x, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                  std::int64_t head_dim, double theta) {
  rotate(x, N, T, row_stride, n_heads, head_dim, theta, 1.0);
}

void rope_backward(float* dx, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                   std::int64_t head_dim, double theta) {
  rotate(dx, N, T, row_stride, n_heads, head_dim, theta, -1.0);
}

void swiglu_forward(float* out, const float* gu, std::int64_t N, std::int64_t F) {
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
      out[n * F + f] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, std::int64_t N, std::int64_t F) {
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f], d = dout[n * F + f];
      const double s = 1.0 / (1.0 + std::exp(-g));
      dgu[n * 2 * F + f] = static_cast<float>(d * u * (s + g * s * (1.0 - s)));
      dgu[n * 2 * F + F + f] = static_cast<float>(d * g * s);
    }
}

void embedding_backward(float* dweight, const float* dout, const std::int32_t* tokens, std::int64_t N, std::int64_t C) {
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < C; ++i) dweight[static_cast<std::int64_t>(tokens[n]) * C + i] += dout[n * C + i];
}

}  // namespace lmcore::model::reference
