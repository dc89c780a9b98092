// Scalar references (see reference.h). bf16 is decoded from its fields and rounded with frexp/nearbyint,
// independently of the bit tricks the kernels use.
#include "lmcore/codegen/reference.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace lmcore::codegen::reference {

double from_bf16(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 7) & 0xff, mantissa = bits & 0x7f;
  double v;
  if (exponent == 0xff) v = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exponent == 0) v = std::ldexp(mantissa, -133);                   // subnormal: m * 2^-126 / 2^7
  else v = std::ldexp(128 + mantissa, exponent - 127 - 7);                  // (1 + m / 2^7) * 2^(e - 127)
  return sign ? -v : v;
}

std::uint16_t to_bf16(double v) {
  if (std::isnan(v)) return 0xffff;
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  // Round |v| to 8 significant bits (to a multiple of 2^-133 below the normal range), ties to even.
  double r;
  if (a < std::ldexp(1.0, -126)) {
    r = std::nearbyint(std::ldexp(a, 133));  // default rounding mode: to nearest, ties to even
    r = std::ldexp(r, -133);
  } else {
    int e;
    std::frexp(a, &e);  // a = m 2^e, 0.5 <= m < 1: 8 significant bits are multiples of 2^(e - 8)
    r = std::ldexp(std::nearbyint(std::ldexp(a, 8 - e)), e - 8);
  }
  if (r > 3.3895313892515355e38 || std::isinf(a)) return sign | 0x7f80;  // beyond the largest bf16: infinity
  if (r == 0) return sign;
  int e;
  const double m = std::frexp(r, &e);  // r = m 2^e
  int exponent = e - 1 + 127;
  std::uint16_t mantissa;
  if (exponent <= 0) {  // subnormal
    exponent = 0;
    mantissa = static_cast<std::uint16_t>(std::ldexp(r, 133));
  } else {
    mantissa = static_cast<std::uint16_t>(std::ldexp(m, 8) - 128);  // m 2^8 in [128, 256)
  }
  return static_cast<std::uint16_t>(sign | (exponent << 7) | mantissa);
}

namespace {
double get(const void* p, std::int64_t i, DType t) {
  if (t == DType::f32) return static_cast<const float*>(p)[i];
  return from_bf16(static_cast<const std::uint16_t*>(p)[i]);
}
// Stores v rounded once to the dtype.
void put(void* p, std::int64_t i, double v, DType t) {
  if (t == DType::f32) static_cast<float*>(p)[i] = static_cast<float>(v);
  else static_cast<std::uint16_t*>(p)[i] = to_bf16(v);
}
}  // namespace

void rmsnorm_forward(double* out, double* rstd, void* residual_out, const void* inp, const void* residual,
                     const float* weight, std::int64_t N, const RmsNormSpec& spec) {
  const std::int64_t C = spec.hidden;
  std::vector<double> x(static_cast<std::size_t>(C));
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t i = 0; i < C; ++i) {
      x[i] = get(inp, n * C + i, spec.io);
      if (spec.residual) {
        // The sum of two f32 (or bf16) values is exact in f64, so one rounding to the io dtype follows.
        put(residual_out, n * C + i, x[i] + get(residual, n * C + i, spec.io), spec.io);
        x[i] = get(residual_out, n * C + i, spec.io);
      }
    }
    double ss = 0;
    for (std::int64_t i = 0; i < C; ++i) ss += x[i] * x[i];
    rstd[n] = 1.0 / std::sqrt(ss / static_cast<double>(C) + static_cast<double>(spec.eps));
    for (std::int64_t i = 0; i < C; ++i) out[n * C + i] = x[i] * rstd[n] * weight[i];
  }
}

void rmsnorm_backward(double* dinp, double* dweight, const void* dinp_in, const float* dweight_in, const void* dout,
                      const void* inp, const float* weight, const float* rstd, std::int64_t N,
                      const RmsNormSpec& spec) {
  const std::int64_t C = spec.hidden;
  for (std::int64_t i = 0; i < C; ++i) dweight[i] = dweight_in[i];
  for (std::int64_t n = 0; n < N; ++n) {
    const double rs = rstd[n];
    // mean over the row of g * xhat, g = dout * w, xhat = x * rstd
    double m = 0;
    for (std::int64_t i = 0; i < C; ++i)
      m += get(dout, n * C + i, spec.out) * weight[i] * get(inp, n * C + i, spec.io) * rs;
    m /= static_cast<double>(C);
    for (std::int64_t i = 0; i < C; ++i) {
      const double g = get(dout, n * C + i, spec.out) * weight[i];
      const double xhat = get(inp, n * C + i, spec.io) * rs;
      dinp[n * C + i] = get(dinp_in, n * C + i, spec.io) + rs * (g - xhat * m);
      dweight[i] += get(dout, n * C + i, spec.out) * xhat;
    }
  }
}

void gemm_epilogue(double* c, double* pre, const float* a, const float* b, const float* bias, const float* residual,
                   std::int64_t M, const GemmSpec& s, const float* aux) {
  const std::int64_t N = s.N, K = s.K, NB = s.act == Act::swiglu ? 2 * N : N;
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t n = 0; n < NB; ++n) {
      double acc = s.bias ? bias[n] : 0.0;
      for (std::int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(a[m * K + k]) * (s.b_trans ? b[n * K + k] : b[k * NB + n]);
      pre[m * NB + n] = acc;
    }
    if (s.act == Act::dswiglu) {
      for (std::int64_t n = 0; n < N; ++n) {
        const double p = pre[m * NB + n], g = aux[m * 2 * N + n], u = aux[m * 2 * N + N + n];
        const double sg = 1 / (1 + std::exp(-g));
        c[m * 2 * N + n] = p * u * sg * (1 + g * (1 - sg));
        c[m * 2 * N + N + n] = p * g * sg;
      }
      continue;
    }
    for (std::int64_t n = 0; n < N; ++n) {
      const double p = pre[m * NB + n];
      double y = p;
      if (s.act == Act::silu) y = p / (1 + std::exp(-p));
      if (s.act == Act::gelu) y = 0.5 * p * (1 + std::tanh(std::sqrt(2 / M_PI) * (p + 0.044715 * p * p * p)));
      if (s.act == Act::swiglu) y = p / (1 + std::exp(-p)) * pre[m * NB + N + n];
      c[m * N + n] = y + (s.residual ? residual[m * N + n] : 0.0);
    }
  }
}

}  // namespace lmcore::codegen::reference
