// Naive attention straight from the definitions, f64 accumulation: the oracle for the kernels.
#include "lmcore/attention/reference.h"

#include <cmath>
#include <limits>
#include <vector>

#include "src/attention/flex_attention_internal.h"

namespace lmcore::attention {

namespace {

struct Inputs {
  detail::AttentionShape sh;
  std::vector<double> q, k, v;
};

Inputs load(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const char* op) {
  Inputs in;
  in.sh = detail::check_qkv(q, k, v, scale, op);
  in.q = q.to_vector<double>();
  in.k = k.to_vector<double>();
  in.v = v.to_vector<double>();
  return in;
}

// Scores of one query row after scale, score_mod and mask (-inf where masked), with the derivative of
// the score_mod in *deriv and the scores before the score_mod in *raw when asked.
void row_scores(const Inputs& in, const MaskMod& mask, const ScoreMod& mod, std::int64_t b, std::int64_t h,
                std::int64_t i, std::vector<double>& s, std::vector<double>* deriv, std::vector<float>* raw = nullptr) {
  const auto& sh = in.sh;
  const std::int64_t hkv = h / (sh.q_heads / sh.kv_heads);
  const double* qr = in.q.data() + ((b * sh.q_heads + h) * sh.q_len + i) * sh.head_dim;
  for (std::int64_t j = 0; j < sh.kv_len; ++j) {
    const double* kr = in.k.data() + ((b * sh.kv_heads + hkv) * sh.kv_len + j) * sh.head_dim;
    double dot = 0;
    for (std::int64_t d = 0; d < sh.head_dim; ++d) dot += qr[d] * kr[d];
    float g = 1.0f;
    if (raw != nullptr) (*raw)[static_cast<std::size_t>(j)] = static_cast<float>(dot * sh.scale);
    const float x = mod.apply(static_cast<float>(dot * sh.scale), b, h, i, j, deriv != nullptr ? &g : nullptr);
    s[static_cast<std::size_t>(j)] = mask.allowed(b, h, i, j) ? static_cast<double>(x)
                                                               : -std::numeric_limits<double>::infinity();
    if (deriv != nullptr) (*deriv)[static_cast<std::size_t>(j)] = g;
  }
}

// Softmax in place; returns lse (-inf for a row with nothing allowed, whose p is then all 0).
double softmax(std::vector<double>& s) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : s) m = std::max(m, x);
  if (m == -std::numeric_limits<double>::infinity()) {
    for (double& x : s) x = 0;
    return m;
  }
  double sum = 0;
  for (double& x : s) {
    x = std::exp(x - m);
    sum += x;
  }
  for (double& x : s) x /= sum;
  return m + std::log(sum);
}

}  // namespace

FlexResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const MaskMod& mask,
                               const ScoreMod& score_mod, double scale) {
  const Inputs in = load(q, k, v, scale, "attention_reference");
  const auto& sh = in.sh;
  Tensor out = Tensor::zeros({sh.batch, sh.q_heads, sh.q_len, sh.value_dim}, DType::f32);
  Tensor lse = Tensor::empty({sh.batch, sh.q_heads, sh.q_len}, DType::f32);
  float* o = out.data<float>();
  float* l = lse.data<float>();
  std::vector<double> s(static_cast<std::size_t>(sh.kv_len));
  for (std::int64_t b = 0; b < sh.batch; ++b) {
    for (std::int64_t h = 0; h < sh.q_heads; ++h) {
      const std::int64_t hkv = h / (sh.q_heads / sh.kv_heads);
      for (std::int64_t i = 0; i < sh.q_len; ++i) {
        row_scores(in, mask, score_mod, b, h, i, s, nullptr);
        const std::int64_t row = (b * sh.q_heads + h) * sh.q_len + i;
        l[row] = static_cast<float>(softmax(s));
        for (std::int64_t e = 0; e < sh.value_dim; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < sh.kv_len; ++j)
            acc += s[static_cast<std::size_t>(j)] *
                   in.v[static_cast<std::size_t>(((b * sh.kv_heads + hkv) * sh.kv_len + j) * sh.value_dim + e)];
          o[row * sh.value_dim + e] = static_cast<float>(acc);
        }
      }
    }
  }
  return {out, lse};
}

FlexGrads attention_backward_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                                       const MaskMod& mask, const ScoreMod& score_mod, double scale) {
  const Inputs in = load(q, k, v, scale, "attention_backward_reference");
  const auto& sh = in.sh;
  const std::vector<double> g = d_out.to_vector<double>();
  std::vector<double> dq(in.q.size(), 0.0), dk(in.k.size(), 0.0), dv(in.v.size(), 0.0);
  std::vector<double> p(static_cast<std::size_t>(sh.kv_len)), deriv(p.size()), dp(p.size());
  const std::int64_t D = sh.head_dim, Dv = sh.value_dim;
  // Score-mod parameters: per element, d loss / d(modified score) times d(modified) / d(table entry).
  const std::vector<std::vector<std::int64_t>> param_shapes = score_mod.parameter_shapes();
  const std::size_t n_params = param_shapes.size();
  std::vector<std::vector<double>> param_grads;
  for (const auto& shape : param_shapes) param_grads.emplace_back(static_cast<std::size_t>(checked_numel(shape)), 0.0);
  std::vector<double*> param_out;
  for (auto& g : param_grads) param_out.push_back(g.data());
  std::vector<float> raw(p.size()), suffix(n_params);
  std::vector<float*> suffix_ptr;
  for (std::size_t x = 0; x < n_params; ++x) suffix_ptr.push_back(suffix.data() + x);
  for (std::int64_t b = 0; b < sh.batch; ++b) {
    for (std::int64_t h = 0; h < sh.q_heads; ++h) {
      const std::int64_t hkv = h / (sh.q_heads / sh.kv_heads);
      for (std::int64_t i = 0; i < sh.q_len; ++i) {
        row_scores(in, mask, score_mod, b, h, i, p, &deriv, n_params > 0 ? &raw : nullptr);
        softmax(p);
        const std::int64_t row = (b * sh.q_heads + h) * sh.q_len + i;
        const double* gr = g.data() + row * Dv;
        // dP_j = dO . v_j;  dS_j = P_j (dP_j - sum_k P_k dP_k) * mod'_j
        double dot = 0;
        for (std::int64_t j = 0; j < sh.kv_len; ++j) {
          const double* vr = in.v.data() + ((b * sh.kv_heads + hkv) * sh.kv_len + j) * Dv;
          double x = 0;
          for (std::int64_t e = 0; e < Dv; ++e) x += gr[e] * vr[e];
          dp[static_cast<std::size_t>(j)] = x;
          dot += p[static_cast<std::size_t>(j)] * x;
        }
        for (std::int64_t j = 0; j < sh.kv_len; ++j) {
          const double pj = p[static_cast<std::size_t>(j)];
          if (pj == 0) continue;
          const std::size_t kv_row = static_cast<std::size_t>((b * sh.kv_heads + hkv) * sh.kv_len + j);
          for (std::int64_t e = 0; e < Dv; ++e) dv[kv_row * Dv + e] += pj * gr[e];
          const double ds_modified = pj * (dp[static_cast<std::size_t>(j)] - dot);
          if (n_params > 0) {
            float unused = 0;
            (void)score_mod.apply(raw[static_cast<std::size_t>(j)], b, h, i, j, &unused, suffix.data());
            const float ds_f = static_cast<float>(ds_modified);
            score_mod.accumulate_parameter_grads(b, h, i, 1, j, 1, &ds_f, suffix_ptr.data(), 1, param_out.data());
          }
          const double ds = ds_modified * deriv[static_cast<std::size_t>(j)] * sh.scale;
          for (std::int64_t d = 0; d < D; ++d) {
            dq[static_cast<std::size_t>(row * D + d)] += ds * in.k[kv_row * D + d];
            dk[kv_row * D + d] += ds * in.q[static_cast<std::size_t>(row * D + d)];
          }
        }
      }
    }
  }
  auto to_f32 = [](const std::vector<double>& x, const Shape& shape) {
    std::vector<float> f(x.begin(), x.end());
    return Tensor::from_vector(f, shape);
  };
  FlexGrads grads{to_f32(dq, q.shape()), to_f32(dk, k.shape()), to_f32(dv, v.shape()), {}};
  for (std::size_t x = 0; x < n_params; ++x) grads.score_mod_grads.push_back(to_f32(param_grads[x], param_shapes[x]));
  return grads;
}

}  // namespace lmcore::attention
