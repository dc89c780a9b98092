// Private pieces shared by the unfused cross-entropy and the fused linear cross-entropy: argument
// checks, the per-token math (one definition, so both paths agree to rounding), the reductions, and
// tracked scratch buffers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "lmcore/core/error.h"
#include "lmcore/core/tensor.h"
#include "lmcore/loss/cross_entropy.h"
#include "src/loss/row_kernels.h"

namespace lmcore::loss_detail {

// Scratch memory as a Tensor, so the allocation tracker (and so the benchmark) sees it.
template <typename T>
struct Buffer {
  Tensor tensor;
  T* ptr = nullptr;
  Buffer() = default;
  explicit Buffer(std::int64_t n) : tensor(Tensor::empty({n}, dtype_of<T>)), ptr(tensor.data<T>()) {}
  // n elements at p, memory the caller owns (a workspace): not allocated, not tracked.
  static Buffer view(T* p, std::int64_t n) {
    Buffer b;
    b.tensor = Tensor::from_blob(p, {n}, dtype_of<T>, nullptr);
    b.ptr = p;
    return b;
  }
  static Buffer zeros(std::int64_t n) {
    Buffer b(n);
    for (std::int64_t i = 0; i < n; ++i) b.ptr[i] = T(0);
    return b;
  }
  T* data() const { return ptr; }
  T& operator[](std::int64_t i) const { return ptr[i]; }
};

// Everything about a loss call that does not depend on the logits: targets, class weights, bias,
// the coefficients of the formula in cross_entropy.h and the mean denominators.
template <typename Acc>
struct LossSetup {
  std::int64_t n = 0, v = 0;
  Tensor target_storage;  // contiguous i64 [N]
  const std::int64_t* target = nullptr;
  Buffer<Acc> class_weight_buf, bias_buf;
  const Acc* class_weight = nullptr;  // [V] or null (all ones)
  const Acc* bias = nullptr;          // [V] or null
  Acc eps = 0, z_scale = 0, cap = 0;
  Reduction reduction = Reduction::mean;
  std::int64_t ignore_index = -100;
  Acc weight_sum = 0;     // sum_j w_j
  double ce_denom = 1.0;  // mean: sum of target weights over counted tokens; else 1
  double z_denom = 1.0;   // mean: number of counted tokens; else 1

  bool counted(std::int64_t i) const { return target[i] != ignore_index; }
  Acc target_weight(std::int64_t i) const { return class_weight ? class_weight[target[i]] : Acc(1); }
};

// Checks the options, target [N] (i64, every value in [0, V) or ignore_index) and, when use_bias, the
// bias, and fills a LossSetup. `op` names the caller in messages.
template <typename Acc>
LossSetup<Acc> make_setup(const char* op, std::int64_t n, std::int64_t v, const Tensor& target,
                          const LossOptions& options, bool use_bias);

// A [V] float tensor widened to Acc into a tracked buffer (checks its shape and dtype, naming `what`).
template <typename Acc>
Buffer<Acc> vector_as(const char* op, const char* what, const Tensor& t, std::int64_t v);

// grad_loss as one value per token: a scalar broadcast for mean/sum, the [N] tensor for none.
template <typename Acc>
Buffer<Acc> grad_per_token(const char* op, const Tensor& grad_loss, Reduction reduction, std::int64_t n);

// Running logsumexp of one token, plus the target logit and the class-weighted logit sum.
template <typename Acc>
struct RowStats {
  Acc m = -std::numeric_limits<Acc>::infinity();  // running max
  Acc s = 0;                                       // sum of exp(z - m)
  Acc zt = 0;                                      // the target's logit
  Acc wz = 0;                                      // sum_j w_j z_j (only with label smoothing)
  Acc lse() const { return m + std::log(s); }
};

// Applies bias and softcap to logits of columns [j0, j0 + c).
template <typename Acc>
inline void transform_logits(const LossSetup<Acc>& S, Acc* z, std::int64_t j0, std::int64_t c) {
  if (S.bias)
    for (std::int64_t j = 0; j < c; ++j) z[j] += S.bias[j0 + j];
  if (S.cap > 0) {
    const Acc inv = Acc(1) / S.cap;
    for (std::int64_t j = 0; j < c; ++j) z[j] = S.cap * std::tanh(z[j] * inv);
  }
}

// Folds the (transformed) logits z of columns [j0, j0 + c) of token i into its stats. The plain loops:
// what f64 runs, and the reference for the f32 vector version below.
template <typename Acc>
inline void fold_chunk_scalar(const LossSetup<Acc>& S, std::int64_t i, RowStats<Acc>& st, const Acc* z,
                              std::int64_t j0, std::int64_t c) {
  Acc cmax = -std::numeric_limits<Acc>::infinity();
  for (std::int64_t j = 0; j < c; ++j) cmax = z[j] > cmax || std::isnan(z[j]) ? z[j] : cmax;
  if (cmax > st.m || std::isnan(cmax)) {
    st.s *= std::exp(st.m - cmax);  // exp(-inf) = 0 on the first chunk
    st.m = cmax;
  }
  const Acc m = st.m;
  Acc s = 0;
  for (std::int64_t j = 0; j < c; ++j) s += std::exp(z[j] - m);
  st.s += s;
  const std::int64_t t = S.target[i];
  if (t >= j0 && t < j0 + c) st.zt = z[t - j0];
  if (S.eps > 0) {
    Acc a = 0;
    if (S.class_weight)
      for (std::int64_t j = 0; j < c; ++j) a += S.class_weight[j0 + j] * z[j];
    else
      for (std::int64_t j = 0; j < c; ++j) a += z[j];
    st.wz += a;
  }
}

// fold_chunk_scalar with f32 through the vector loops of row_kernels.h.
template <typename Acc>
inline void fold_chunk(const LossSetup<Acc>& S, std::int64_t i, RowStats<Acc>& st, const Acc* z, std::int64_t j0,
                       std::int64_t c) {
  if constexpr (std::is_same_v<Acc, float>) {
    const float cmax = row_max_f32(z, c);
    if (cmax > st.m || std::isnan(cmax)) {
      st.s *= std::exp(st.m - cmax);
      st.m = cmax;
    }
    st.s += row_exp_sum_f32(z, c, st.m);
    const std::int64_t t = S.target[i];
    if (t >= j0 && t < j0 + c) st.zt = z[t - j0];
    if (S.eps > 0) st.wz += row_weighted_sum_f32(z, S.class_weight ? S.class_weight + j0 : nullptr, c);
  } else {
    fold_chunk_scalar(S, i, st, z, j0, c);
  }
}

// Per-token cross-entropy and z-loss terms (0 for ignored tokens).
template <typename Acc>
inline void row_loss(const LossSetup<Acc>& S, std::int64_t i, Acc lse, Acc zt, Acc wz, Acc& ce, Acc& zl) {
  if (!S.counted(i)) {
    ce = zl = 0;
    return;
  }
  const Acc wt = S.target_weight(i);
  ce = (1 - S.eps) * wt * (lse - zt);
  if (S.eps > 0) ce += S.eps / static_cast<Acc>(S.v) * (S.weight_sum * lse - wz);
  zl = S.z_scale * lse * lse;
}

// d loss / d z_ij = p_ij * a_i - bw_i * w_j - bt_i * [j == t_i], times the softcap derivative
// (1 - (z/c)^2) with z the capped logit. g is the token's grad_loss.
template <typename Acc>
struct RowGrad {
  Acc a = 0, bw = 0, bt = 0;
};

template <typename Acc>
inline RowGrad<Acc> row_grad(const LossSetup<Acc>& S, std::int64_t i, Acc lse, Acc g) {
  RowGrad<Acc> r;
  if (!S.counted(i)) return r;
  const Acc gce = g / static_cast<Acc>(S.ce_denom), gz = g / static_cast<Acc>(S.z_denom);
  const Acc wt = S.target_weight(i);
  const Acc inv_v = Acc(1) / static_cast<Acc>(S.v);
  r.bt = gce * (1 - S.eps) * wt;
  r.bw = gce * S.eps * inv_v;
  r.a = r.bt + r.bw * S.weight_sum + 2 * S.z_scale * lse * gz;
  return r;
}

// Turns the logits z of columns [j0, j0 + c) of token i into d loss / d (pre-softcap) logits, in place.
// The plain loops (f64, softcap, and the reference for the f32 vector version below).
template <typename Acc>
inline void grad_chunk_scalar(const LossSetup<Acc>& S, std::int64_t i, const RowGrad<Acc>& r, Acc lse, Acc* z,
                              std::int64_t j0, std::int64_t c) {
  if (!S.counted(i)) {
    for (std::int64_t j = 0; j < c; ++j) z[j] = 0;
    return;
  }
  const std::int64_t t = S.target[i];
  const bool has_t = t >= j0 && t < j0 + c;
  if (S.cap > 0) {
    // Softcap: z here is c * tanh(x / c), whose derivative in x is 1 - (z / c)^2.
    const Acc inv = Acc(1) / S.cap;
    for (std::int64_t j = 0; j < c; ++j) {
      const Acc zj = z[j], q = zj * inv;
      Acc gj = std::exp(zj - lse) * r.a - r.bw * (S.class_weight ? S.class_weight[j0 + j] : Acc(1));
      if (j0 + j == t) gj -= r.bt;
      z[j] = gj * (1 - q * q);
    }
    return;
  }
  if (S.class_weight) {
    for (std::int64_t j = 0; j < c; ++j) z[j] = std::exp(z[j] - lse) * r.a - r.bw * S.class_weight[j0 + j];
  } else {
    for (std::int64_t j = 0; j < c; ++j) z[j] = std::exp(z[j] - lse) * r.a - r.bw;
  }
  if (has_t) z[t - j0] -= r.bt;
}

// grad_chunk_scalar with f32 through the vector loops of row_kernels.h (softcap stays scalar).
template <typename Acc>
inline void grad_chunk(const LossSetup<Acc>& S, std::int64_t i, const RowGrad<Acc>& r, Acc lse, Acc* z,
                       std::int64_t j0, std::int64_t c) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (S.counted(i) && S.cap == 0) {
      row_softmax_grad_f32(z, c, lse, r.a, r.bw, S.class_weight ? S.class_weight + j0 : nullptr);
      const std::int64_t t = S.target[i];
      if (t >= j0 && t < j0 + c) z[t - j0] -= r.bt;
      return;
    }
  }
  grad_chunk_scalar(S, i, r, lse, z, j0, c);
}

// One f32 token whose whole vocabulary is in z (one chunk, no softcap): its loss terms, and d_logits
// in place, with one exp per logit instead of fold_chunk's and grad_chunk's two: e = exp(z - max)
// stays in z, lse = max + log(sum e), and d z = e * (a / sum e) - bw * w - bt * [j == t].
inline void loss_and_grad_row_f32(const LossSetup<float>& S, std::int64_t i, float* z, float g, float& lse,
                                  float& ce, float& zl) {
  const std::int64_t v = S.v, t = S.target[i];
  const float m = row_max_f32(z, v);
  const float zt = t >= 0 && t < v ? z[t] : 0.0f;
  const float wz = S.eps > 0 ? row_weighted_sum_f32(z, S.class_weight, v) : 0.0f;
  const float s = row_exp_store_sum_f32(z, v, m);
  lse = m + std::log(s);
  row_loss(S, i, lse, zt, wz, ce, zl);
  if (!S.counted(i)) {
    std::fill(z, z + v, 0.0f);
    return;
  }
  const RowGrad<float> r = row_grad(S, i, lse, g);
  row_scaled_grad_f32(z, v, r.a / s, r.bw, S.class_weight);
  z[t] -= r.bt;
}

// Collects per-token ce/zl into the LossResult of the reduction.
template <typename Acc>
LossResult finish_loss(const LossSetup<Acc>& S, const Acc* ce, const Acc* zl, Tensor lse);

// dst += src (same shape, 1-D or 2-D, any float dtypes), computed in double.
void add_into(const Tensor& dst, const Tensor& src, const char* op);

}  // namespace lmcore::loss_detail
