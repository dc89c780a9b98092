// The oracle of the loss tests: the (linear) cross-entropy of lmcore/loss/cross_entropy.h, forward and
// backward, transcribed from the definition in plain f64 loops. It shares nothing with src/loss (no
// fold/row helpers, no GEMM, no chunking): logits one dot product at a time, the softmax of the whole
// row at once, and the gradient from its closed form, which GradientsMatchFiniteDifferences checks
// against finite differences of this file's own loss.
//
//   x = hidden W^T + bias              [N, V]
//   z = cap tanh(x / cap) (cap > 0), else x
//   lse_i = log sum_j exp z_ij,  log p_ij = z_ij - lse_i
//   ce_i = -(1 - eps) w_t log p_it - eps / V sum_j w_j log p_ij,   zl_i = zs lse_i^2   (0 when ignored)
//   mean: sum ce / sum_counted w_t + sum zl / count;  sum: sum ce + sum zl;  none: ce_i + zl_i
//
//   d ce_i / d z_ij = (1 - eps) w_t (p_ij - [j = t]) + eps / V (W p_ij - w_j),   W = sum_k w_k
//   d zl_i / d z_ij = 2 zs lse_i p_ij,    d z / d x = 1 - (z / cap)^2
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "lmcore/core/tensor.h"
#include "lmcore/loss/cross_entropy.h"

namespace lmcore::test {

struct NaiveLoss {
  std::vector<double> ce, zl, lse;     // per token
  double total = 0.0, z_total = 0.0;   // the reduction (mean or sum); none: unused
  std::vector<double> d_hidden;        // [N, H]
  std::vector<double> d_weight;        // [V, H]
  std::vector<double> d_bias;          // [V]
};

// hidden [N, H], weight [V, H], target [N] i64; bias and class_weight come from o (when defined);
// grad: [N] for reduction none, else a scalar (undefined: no gradients).
inline NaiveLoss naive_linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                            const LossOptions& o, const Tensor& grad = Tensor()) {
  const std::int64_t n = hidden.size(0), h = hidden.size(1), v = weight.size(0);
  const std::vector<double> hs = hidden.to_vector<double>(), ws = weight.to_vector<double>();
  const std::vector<std::int64_t> t = target.to_vector<std::int64_t>();
  const std::vector<double> b = o.bias.defined() ? o.bias.to_vector<double>() : std::vector<double>(v, 0.0);
  const std::vector<double> cw =
      o.class_weight.defined() ? o.class_weight.to_vector<double>() : std::vector<double>(v, 1.0);
  const double eps = o.label_smoothing, zs = o.z_loss, cap = o.softcap;
  double W = 0.0;
  for (double x : cw) W += x;

  NaiveLoss r;
  std::vector<std::vector<double>> z(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(v)));
  double wsum_t = 0.0, count = 0.0, ce_sum = 0.0, zl_sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    auto& zi = z[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < v; ++j) {
      double x = b[j];
      for (std::int64_t k = 0; k < h; ++k) x += hs[i * h + k] * ws[j * h + k];
      zi[j] = cap > 0 ? cap * std::tanh(x / cap) : x;
    }
    double mx = zi[0];
    for (double x : zi) mx = std::max(mx, x);
    double s = 0.0;
    for (double x : zi) s += std::exp(x - mx);
    const double lse = mx + std::log(s);
    double ce = 0.0, zl = 0.0;
    if (t[i] != o.ignore_index) {
      double smooth = 0.0;
      for (std::int64_t j = 0; j < v; ++j) smooth -= cw[j] * (zi[j] - lse);
      ce = -(1 - eps) * cw[t[i]] * (zi[t[i]] - lse) + eps / static_cast<double>(v) * smooth;
      zl = zs * lse * lse;
      wsum_t += cw[t[i]];
      count += 1;
    }
    r.ce.push_back(ce);
    r.zl.push_back(zl);
    r.lse.push_back(lse);
    ce_sum += ce;
    zl_sum += zl;
  }
  const bool mean = o.reduction == Reduction::mean;
  r.total = mean ? ce_sum / wsum_t + zl_sum / count : ce_sum + zl_sum;
  r.z_total = mean ? zl_sum / count : zl_sum;
  if (!grad.defined()) return r;

  const std::vector<double> g = grad.to_vector<double>();
  r.d_hidden.assign(static_cast<std::size_t>(n * h), 0.0);
  r.d_weight.assign(static_cast<std::size_t>(v * h), 0.0);
  r.d_bias.assign(static_cast<std::size_t>(v), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] == o.ignore_index) continue;
    const double gi = o.reduction == Reduction::none ? g[i] : g[0];
    const double gce = mean ? gi / wsum_t : gi, gz = mean ? gi / count : gi;
    const auto& zi = z[static_cast<std::size_t>(i)];
    const double lse = r.lse[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < v; ++j) {
      const double p = std::exp(zi[j] - lse);
      double dz = gce * ((1 - eps) * cw[t[i]] * (p - (j == t[i] ? 1.0 : 0.0)) +
                         eps / static_cast<double>(v) * (W * p - cw[j])) +
                  gz * 2 * zs * lse * p;
      if (cap > 0) dz *= 1 - (zi[j] / cap) * (zi[j] / cap);
      for (std::int64_t k = 0; k < h; ++k) {
        r.d_hidden[i * h + k] += dz * ws[j * h + k];
        r.d_weight[j * h + k] += dz * hs[i * h + k];
      }
      r.d_bias[j] += dz;
    }
  }
  return r;
}

}  // namespace lmcore::test
