// Naive attention straight from the definitions, f64 throughout: the oracle for the flex and sdpa kernels.
//
// It shares no code with the kernels it checks: its own shape checks and scale, the mask asked element
// by element from MaskMod::allowed (the definition, not the block lists), every score-modifier step
// evaluated from the formulas in score_mod.h on the plain description ScoreMod::steps() gives (never
// ScoreMod::apply / apply_tile), and the chain rule into the modifier parameters written out per element.
#include "lmcore/attention/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lmcore/core/error.h"

namespace lmcore::attention {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Problem {
  std::int64_t B = 0, Hq = 0, Hkv = 0, L = 0, S = 0, D = 0, Dv = 0;
  double scale = 0;
  std::vector<double> q, k, v;  // row-major [B, Hq, L, D], [B, Hkv, S, D], [B, Hkv, S, Dv]
  std::vector<ScoreModStep> steps;

  double qv(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t d) const {
    return q[static_cast<std::size_t>(((b * Hq + h) * L + i) * D + d)];
  }
  std::size_t kv_row(std::int64_t b, std::int64_t h, std::int64_t j) const {
    const std::int64_t hkv = h / (Hq / Hkv);
    return static_cast<std::size_t>((b * Hkv + hkv) * S + j);
  }
};

Problem load(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreMod& mod, double scale, const char* op) {
  for (const Tensor* t : {&q, &k, &v})
    LMCORE_CHECK(t->defined() && t->dim() == 4, "{}: expected q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]",
                 op);
  Problem p;
  p.B = q.size(0), p.Hq = q.size(1), p.L = q.size(2), p.D = q.size(3);
  p.Hkv = k.size(1), p.S = k.size(2), p.Dv = v.size(3);
  LMCORE_CHECK(k.size(0) == p.B && v.size(0) == p.B && v.size(1) == p.Hkv && v.size(2) == p.S && k.size(3) == p.D,
               "{}: shapes do not fit: q {}, k {}, v {}", op, shape_str(q.shape()), shape_str(k.shape()),
               shape_str(v.shape()));
  LMCORE_CHECK(p.Hkv >= 1 && p.Hq % p.Hkv == 0, "{}: Hq = {} is not a multiple of Hkv = {}", op, p.Hq, p.Hkv);
  p.scale = scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(p.D)) : scale;
  p.q = q.to_vector<double>();
  p.k = k.to_vector<double>();
  p.v = v.to_vector<double>();
  p.steps = mod.steps();
  for (const ScoreModStep& s : p.steps) {
    if (s.kind == ScoreModStep::Kind::alibi)
      LMCORE_CHECK(static_cast<std::int64_t>(s.table.size()) >= p.Hq, "{}: {} alibi slopes for {} heads", op,
                   s.table.size(), p.Hq);
    if (s.kind == ScoreModStep::Kind::relative_bias) {
      const std::int64_t rows = static_cast<std::int64_t>(s.table.size()) / (2 * s.radius + 1);
      LMCORE_CHECK(rows == 1 || rows >= p.Hq, "{}: relative bias has {} rows for {} heads", op, rows, p.Hq);
    }
  }
  return p;
}

// Index into a relative-position table: row h (or the one shared row), column clamp(q - kv, -R, R) + R.
std::size_t bias_entry(const ScoreModStep& s, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t width = 2 * s.radius + 1;
  const std::int64_t row = static_cast<std::int64_t>(s.table.size()) == width ? 0 : h;
  const std::int64_t rel = std::min(std::max(i - j, -s.radius), s.radius);
  return static_cast<std::size_t>(row * width + rel + s.radius);
}

// One element through the chain: returns the modified score; in[t] receives the input of step t.
double modify(const Problem& p, double x, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j,
              std::vector<double>* in) {
  for (std::size_t t = 0; t < p.steps.size(); ++t) {
    const ScoreModStep& s = p.steps[t];
    if (in != nullptr) (*in)[t] = x;
    switch (s.kind) {
      case ScoreModStep::Kind::relative_bias: x += s.table[bias_entry(s, h, i, j)]; break;
      case ScoreModStep::Kind::alibi:
        x += static_cast<double>(s.table[static_cast<std::size_t>(h)]) * static_cast<double>(j - i);
        break;
      case ScoreModStep::Kind::softcap: x = s.cap * std::tanh(x / s.cap); break;
      case ScoreModStep::Kind::function: x = s.fn(x, b, h, i, j); break;
    }
  }
  return x;
}

// Back through the chain: g = d loss / d(modified score) in, d loss / d(raw score) out; adds
// d loss / d table entry into grads[parameter step].
double unmodify(const Problem& p, double g, const std::vector<double>& in, std::int64_t b, std::int64_t h,
                std::int64_t i, std::int64_t j, std::vector<std::vector<double>>& grads) {
  std::size_t param = 0;
  for (const ScoreModStep& s : p.steps)
    param += s.kind == ScoreModStep::Kind::relative_bias || s.kind == ScoreModStep::Kind::alibi ||
                     (s.kind == ScoreModStep::Kind::softcap && s.trainable)
                 ? 1
                 : 0;
  for (std::size_t t = p.steps.size(); t-- > 0;) {
    const ScoreModStep& s = p.steps[t];
    switch (s.kind) {
      case ScoreModStep::Kind::relative_bias: grads[--param][bias_entry(s, h, i, j)] += g; break;
      case ScoreModStep::Kind::alibi: grads[--param][static_cast<std::size_t>(h)] += g * static_cast<double>(j - i); break;
      case ScoreModStep::Kind::softcap: {
        const double th = std::tanh(in[t] / s.cap);
        if (s.trainable) grads[--param][0] += g * (th - in[t] / s.cap * (1.0 - th * th));
        g *= 1.0 - th * th;
        break;
      }
      case ScoreModStep::Kind::function:
        LMCORE_CHECK(static_cast<bool>(s.derivative),
                     "attention_backward_reference: score_mod '{}' has no derivative", s.name);
        g *= s.derivative(in[t], b, h, i, j);
        break;
    }
  }
  return g;
}

// Probabilities of row (b, h, i) into prob (0 where masked); returns the log-sum-exp (-inf, and prob all 0,
// when no key is allowed). in[j] receives the step inputs of key j when not null.
double row_softmax(const Problem& p, const MaskMod& mask, std::int64_t b, std::int64_t h, std::int64_t i,
                   std::vector<double>& prob, std::vector<std::vector<double>>* in) {
  double m = kNegInf;
  for (std::int64_t j = 0; j < p.S; ++j) {
    double s = kNegInf;
    if (mask.allowed(b, h, i, j)) {
      const std::size_t kr = p.kv_row(b, h, j);
      double dot = 0;
      for (std::int64_t d = 0; d < p.D; ++d) dot += p.qv(b, h, i, d) * p.k[kr * static_cast<std::size_t>(p.D) + d];
      s = modify(p, dot * p.scale, b, h, i, j, in != nullptr ? &(*in)[static_cast<std::size_t>(j)] : nullptr);
    }
    prob[static_cast<std::size_t>(j)] = s;
    m = std::max(m, s);
  }
  if (m == kNegInf) {
    std::fill(prob.begin(), prob.end(), 0.0);
    return kNegInf;
  }
  double sum = 0;
  for (double& x : prob) sum += (x = std::exp(x - m));
  for (double& x : prob) x /= sum;
  return m + std::log(sum);
}

Tensor f64_tensor(const std::vector<double>& x, const Shape& shape) { return Tensor::from_vector(x, shape); }

}  // namespace

FlexResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const MaskMod& mask,
                               const ScoreMod& score_mod, double scale) {
  const Problem p = load(q, k, v, score_mod, scale, "attention_reference");
  std::vector<double> out(static_cast<std::size_t>(p.B * p.Hq * p.L * p.Dv), 0.0);
  std::vector<double> lse(static_cast<std::size_t>(p.B * p.Hq * p.L));
  std::vector<double> prob(static_cast<std::size_t>(p.S));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.Hq; ++h)
      for (std::int64_t i = 0; i < p.L; ++i) {
        const std::int64_t row = (b * p.Hq + h) * p.L + i;
        lse[static_cast<std::size_t>(row)] = row_softmax(p, mask, b, h, i, prob, nullptr);
        for (std::int64_t j = 0; j < p.S; ++j) {
          const double pj = prob[static_cast<std::size_t>(j)];
          const std::size_t vr = p.kv_row(b, h, j) * static_cast<std::size_t>(p.Dv);
          for (std::int64_t e = 0; e < p.Dv; ++e) out[static_cast<std::size_t>(row * p.Dv + e)] += pj * p.v[vr + e];
        }
      }
  return {f64_tensor(out, {p.B, p.Hq, p.L, p.Dv}), f64_tensor(lse, {p.B, p.Hq, p.L})};
}

FlexGrads attention_backward_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                                       const MaskMod& mask, const ScoreMod& score_mod, double scale,
                                       const Tensor& out, const Tensor& d_lse) {
  const Problem p = load(q, k, v, score_mod, scale, "attention_backward_reference");
  LMCORE_CHECK(d_out.defined() && d_out.shape() == (Shape{p.B, p.Hq, p.L, p.Dv}),
               "attention_backward_reference: d_out must be [{}, {}, {}, {}]", p.B, p.Hq, p.L, p.Dv);
  LMCORE_CHECK(!out.defined() || out.shape() == d_out.shape(), "attention_backward_reference: out must be [{}, {}, {}, {}]",
               p.B, p.Hq, p.L, p.Dv);
  LMCORE_CHECK(!d_lse.defined() || d_lse.shape() == (Shape{p.B, p.Hq, p.L}),
               "attention_backward_reference: d_lse must be [{}, {}, {}]", p.B, p.Hq, p.L);
  const std::vector<double> g = d_out.to_vector<double>();
  const std::vector<double> gl = d_lse.defined() ? d_lse.to_vector<double>() : std::vector<double>();
  const std::vector<double> o = out.defined() ? out.to_vector<double>() : std::vector<double>();
  std::vector<double> dq(p.q.size(), 0.0), dk(p.k.size(), 0.0), dv(p.v.size(), 0.0);
  std::vector<std::vector<double>> param_grads;
  std::vector<Shape> param_shapes;
  for (const ScoreModStep& s : p.steps) {
    if (s.kind == ScoreModStep::Kind::relative_bias) {
      const std::int64_t width = 2 * s.radius + 1;
      param_shapes.push_back({static_cast<std::int64_t>(s.table.size()) / width, width});
    } else if (s.kind == ScoreModStep::Kind::alibi) {
      param_shapes.push_back({static_cast<std::int64_t>(s.table.size())});
    } else if (s.kind == ScoreModStep::Kind::softcap && s.trainable) {
      param_shapes.push_back({1});
      param_grads.emplace_back(1, 0.0);
      continue;
    } else {
      continue;
    }
    param_grads.emplace_back(s.table.size(), 0.0);
  }
  std::vector<double> prob(static_cast<std::size_t>(p.S)), dprob(prob.size());
  std::vector<std::vector<double>> in(prob.size(), std::vector<double>(p.steps.size()));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.Hq; ++h)
      for (std::int64_t i = 0; i < p.L; ++i) {
        row_softmax(p, mask, b, h, i, prob, &in);
        const std::int64_t row = (b * p.Hq + h) * p.L + i;
        const double* gr = g.data() + row * p.Dv;
        // out = sum_j P_j v_j:  dv_j += P_j dO,  dP_j = dO . v_j
        // P = softmax(S):       dS_j = P_j (dP_j - sum_l P_l dP_l)
        double delta = 0;
        for (std::int64_t j = 0; j < p.S; ++j) {
          const std::size_t vr = p.kv_row(b, h, j) * static_cast<std::size_t>(p.Dv);
          double x = 0;
          for (std::int64_t e = 0; e < p.Dv; ++e) x += gr[e] * p.v[vr + e];
          dprob[static_cast<std::size_t>(j)] = x;
          delta += prob[static_cast<std::size_t>(j)] * x;
        }
        if (!o.empty()) {
          delta = 0;
          for (std::int64_t e = 0; e < p.Dv; ++e) delta += gr[e] * o[static_cast<std::size_t>(row * p.Dv + e)];
        }
        for (std::int64_t j = 0; j < p.S; ++j) {
          const double pj = prob[static_cast<std::size_t>(j)];
          if (pj == 0) continue;  // masked (or underflowed): no path to the inputs
          const std::size_t kr = p.kv_row(b, h, j);
          for (std::int64_t e = 0; e < p.Dv; ++e) dv[kr * static_cast<std::size_t>(p.Dv) + e] += pj * gr[e];
          // lse = log sum_j exp(S_j):  d lse / d S_j = P_j
          const double ds_mod = pj * (dprob[static_cast<std::size_t>(j)] - delta) +
                                (gl.empty() ? 0.0 : pj * gl[static_cast<std::size_t>(row)]);
          // S_j = mods(scale * q . k_j): through the modifier chain, then the scale.
          const double ds = unmodify(p, ds_mod, in[static_cast<std::size_t>(j)], b, h, i, j, param_grads) * p.scale;
          for (std::int64_t d = 0; d < p.D; ++d) {
            dq[static_cast<std::size_t>(row * p.D + d)] += ds * p.k[kr * static_cast<std::size_t>(p.D) + d];
            dk[kr * static_cast<std::size_t>(p.D) + d] += ds * p.qv(b, h, i, d);
          }
        }
      }
  FlexGrads grads{f64_tensor(dq, q.shape()), f64_tensor(dk, k.shape()), f64_tensor(dv, v.shape()), {}};
  for (std::size_t x = 0; x < param_grads.size(); ++x) grads.score_mod_grads.push_back(f64_tensor(param_grads[x], param_shapes[x]));
  return grads;
}

}  // namespace lmcore::attention
