// The built-in score modifiers and their derivatives. See lmcore/attention/score_mod.h.
#include "lmcore/attention/score_mod.h"

#include <algorithm>
#include <cmath>

#include "lmcore/core/error.h"

namespace lmcore::attention {

struct ScoreMod::Step {
  enum class Kind { relative_bias, alibi, softcap, function } kind;
  std::vector<float> table;   // relative_bias: [heads][2R + 1]; alibi: slopes
  std::int64_t radius = 0;    // relative_bias
  float cap = 0;              // softcap
  bool trainable = false;     // softcap: the cap is a parameter
  ScoreFunction fn, derivative;
  std::string name;

  // Steps that add a parameter to the score (d out / d their output is 1 at their own position).
  bool additive() const { return kind == Kind::relative_bias || kind == Kind::alibi; }
  bool has_parameters() const { return additive() || (kind == Kind::softcap && trainable); }
  std::int64_t bias_index(std::int64_t h, std::int64_t rel) const {
    const std::int64_t width = 2 * radius + 1;
    const std::int64_t heads = static_cast<std::int64_t>(table.size()) / width;
    const std::int64_t row = heads == 1 ? 0 : h;
    return row * width + std::clamp(rel, -radius, radius) + radius;
  }
  float bias_at(std::int64_t h, std::int64_t rel) const { return table[static_cast<std::size_t>(bias_index(h, rel))]; }
};

ScoreMod ScoreMod::relative_position_bias(std::vector<float> bias, std::int64_t max_distance) {
  LMCORE_CHECK(max_distance >= 0, "ScoreMod::relative_position_bias: expected max_distance >= 0, found {}",
               max_distance);
  const std::int64_t width = 2 * max_distance + 1;
  LMCORE_CHECK(!bias.empty() && static_cast<std::int64_t>(bias.size()) % width == 0,
               "ScoreMod::relative_position_bias: expected [heads][2 * {} + 1] = heads x {} values, found {}",
               max_distance, width, bias.size());
  auto s = std::make_shared<Step>();
  s->kind = Step::Kind::relative_bias;
  s->table = std::move(bias);
  s->radius = max_distance;
  ScoreMod m;
  m.steps_.push_back(std::move(s));
  return m;
}

ScoreMod ScoreMod::alibi(std::vector<float> slopes) {
  LMCORE_CHECK(!slopes.empty(), "ScoreMod::alibi: expected one slope per head, found none");
  auto s = std::make_shared<Step>();
  s->kind = Step::Kind::alibi;
  s->table = std::move(slopes);
  ScoreMod m;
  m.steps_.push_back(std::move(s));
  return m;
}

std::vector<float> ScoreMod::alibi_slopes(std::int64_t heads) {
  LMCORE_CHECK(heads >= 1, "ScoreMod::alibi_slopes: expected heads >= 1, found {}", heads);
  std::vector<float> slopes(static_cast<std::size_t>(heads));
  for (std::int64_t i = 0; i < heads; ++i)
    slopes[static_cast<std::size_t>(i)] = static_cast<float>(std::exp2(-8.0 * static_cast<double>(i + 1) / heads));
  return slopes;
}

ScoreMod ScoreMod::softcap(float cap, bool trainable) {
  LMCORE_CHECK(cap > 0 && std::isfinite(cap), "ScoreMod::softcap: expected a finite cap > 0, found {}", cap);
  auto s = std::make_shared<Step>();
  s->kind = Step::Kind::softcap;
  s->cap = cap;
  s->trainable = trainable;
  ScoreMod m;
  m.steps_.push_back(std::move(s));
  return m;
}

ScoreMod ScoreMod::from_function(ScoreFunction fn, ScoreFunction derivative, std::string name) {
  LMCORE_CHECK(static_cast<bool>(fn), "ScoreMod::from_function: the function is empty");
  auto s = std::make_shared<Step>();
  s->kind = Step::Kind::function;
  s->fn = std::move(fn);
  s->derivative = std::move(derivative);
  s->name = std::move(name);
  ScoreMod m;
  m.steps_.push_back(std::move(s));
  return m;
}

ScoreMod ScoreMod::then(const ScoreMod& next) const {
  ScoreMod m = *this;
  m.steps_.insert(m.steps_.end(), next.steps_.begin(), next.steps_.end());
  return m;
}

bool ScoreMod::has_derivative() const {
  for (const auto& s : steps_)
    if (s->kind == Step::Kind::function && !s->derivative) return false;
  return true;
}

bool ScoreMod::has_callable() const {
  for (const auto& s : steps_)
    if (s->kind == Step::Kind::function) return true;
  return false;
}

std::string ScoreMod::describe() const {
  if (steps_.empty()) return "identity";
  std::string out;
  for (const auto& s : steps_) {
    if (!out.empty()) out += " then ";
    switch (s->kind) {
      case Step::Kind::relative_bias: out += fmt::format("relative_position_bias(R={})", s->radius); break;
      case Step::Kind::alibi: out += "alibi"; break;
      case Step::Kind::softcap: out += fmt::format("softcap({}{})", s->cap, s->trainable ? ", trainable" : ""); break;
      case Step::Kind::function: out += s->name; break;
    }
  }
  return out;
}

void ScoreMod::check_heads(std::int64_t heads, const char* op) const {
  for (const auto& s : steps_) {
    if (s->kind == Step::Kind::alibi)
      LMCORE_CHECK(static_cast<std::int64_t>(s->table.size()) >= heads,
                   "{}: alibi has {} slopes, expected one per query head ({})", op, s->table.size(), heads);
    if (s->kind == Step::Kind::relative_bias) {
      const std::int64_t rows = static_cast<std::int64_t>(s->table.size()) / (2 * s->radius + 1);
      LMCORE_CHECK(rows == 1 || rows >= heads,
                   "{}: relative_position_bias has {} rows, expected 1 or one per query head ({})", op, rows, heads);
    }
  }
}

float ScoreMod::apply(float score, std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx,
                      float* derivative, float* suffix) const {
  float d = 1.0f;
  std::int64_t params = 0;  // parameter steps passed so far
  // A step with derivative g multiplies d and the suffix of every parameter step before it.
  auto chain = [&](float g) {
    d *= g;
    if (suffix != nullptr)
      for (std::int64_t p = 0; p < params; ++p) suffix[p] *= g;
  };
  for (const auto& s : steps_) {
    switch (s->kind) {
      case Step::Kind::relative_bias: score += s->bias_at(h, q_idx - kv_idx); break;
      case Step::Kind::alibi: score += s->table[static_cast<std::size_t>(h)] * static_cast<float>(kv_idx - q_idx); break;
      case Step::Kind::softcap: {
        const float x = score, t = std::tanh(score / s->cap);
        score = s->cap * t;
        chain(1.0f - t * t);
        // d(c tanh(x / c)) / dc = tanh(x / c) - (x / c)(1 - tanh^2(x / c))
        if (s->trainable && suffix != nullptr) suffix[params] = t - x / s->cap * (1.0f - t * t);
        break;
      }
      case Step::Kind::function:
        if (derivative != nullptr || suffix != nullptr) {
          LMCORE_CHECK(static_cast<bool>(s->derivative),
                       "flex_attention_backward: score_mod '{}' is a callable without a derivative; pass one to "
                       "ScoreMod::from_function for the backward pass",
                       s->name);
          chain(s->derivative(score, b, h, q_idx, kv_idx));
        }
        score = s->fn(score, b, h, q_idx, kv_idx);
        break;
    }
    if (s->additive() && suffix != nullptr) suffix[params] = 1.0f;
    if (s->has_parameters()) ++params;
  }
  if (derivative != nullptr) *derivative = d;
  return score;
}

void ScoreMod::apply_tile(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                          std::int64_t nk, float* s, std::int64_t ld, float* deriv, float* const* suffix) const {
  if (deriv != nullptr)
    for (std::int64_t i = 0; i < nq; ++i) std::fill_n(deriv + i * ld, nk, 1.0f);
  std::int64_t params = 0;  // parameter steps passed so far
  for (const auto& st : steps_) {
    if (st->has_parameters() && suffix != nullptr)
      for (std::int64_t i = 0; i < nq; ++i) std::fill_n(suffix[params] + i * ld, nk, 1.0f);
    // Later steps with a derivative other than 1 chain into the suffix of every earlier parameter step.
    const bool chains = suffix != nullptr && params > 0 && !st->additive();
    // A trainable softcap's own suffix is d out / d cap (set below), not 1.
    const bool cap_grad = suffix != nullptr && st->kind == Step::Kind::softcap && st->trainable;
    for (std::int64_t i = 0; i < nq; ++i) {
      float* row = s + i * ld;
      float* drow = deriv != nullptr ? deriv + i * ld : nullptr;
      const std::int64_t q = q0 + i;
      switch (st->kind) {
        case Step::Kind::relative_bias:
          for (std::int64_t j = 0; j < nk; ++j) row[j] += st->bias_at(h, q - (k0 + j));
          break;
        case Step::Kind::alibi: {
          const float slope = st->table[static_cast<std::size_t>(h)];
          for (std::int64_t j = 0; j < nk; ++j) row[j] += slope * static_cast<float>(k0 + j - q);
          break;
        }
        case Step::Kind::softcap: {
          const float inv = 1.0f / st->cap;
          for (std::int64_t j = 0; j < nk; ++j) {
            const float t = std::tanh(row[j] * inv);
            if (cap_grad) suffix[params][i * ld + j] = t - row[j] * inv * (1.0f - t * t);
            row[j] = st->cap * t;
            if (drow != nullptr) drow[j] *= 1.0f - t * t;
            if (chains)
              for (std::int64_t p = 0; p < params; ++p) suffix[p][i * ld + j] *= 1.0f - t * t;
          }
          break;
        }
        case Step::Kind::function:
          LMCORE_CHECK((drow == nullptr && !chains) || static_cast<bool>(st->derivative),
                       "flex_attention_backward: score_mod '{}' is a callable without a derivative; pass one to "
                       "ScoreMod::from_function for the backward pass",
                       st->name);
          for (std::int64_t j = 0; j < nk; ++j) {
            if (drow != nullptr || chains) {
              const float g = st->derivative(row[j], b, h, q, k0 + j);
              if (drow != nullptr) drow[j] *= g;
              if (chains)
                for (std::int64_t p = 0; p < params; ++p) suffix[p][i * ld + j] *= g;
            }
            row[j] = st->fn(row[j], b, h, q, k0 + j);
          }
          break;
      }
    }
    if (st->has_parameters()) ++params;
  }
}

std::vector<ScoreModStep> ScoreMod::steps() const {
  std::vector<ScoreModStep> out;
  for (const auto& s : steps_) {
    ScoreModStep v;
    switch (s->kind) {
      case Step::Kind::relative_bias: v.kind = ScoreModStep::Kind::relative_bias; break;
      case Step::Kind::alibi: v.kind = ScoreModStep::Kind::alibi; break;
      case Step::Kind::softcap: v.kind = ScoreModStep::Kind::softcap; break;
      case Step::Kind::function: v.kind = ScoreModStep::Kind::function; break;
    }
    v.table = s->table;
    v.radius = s->radius;
    v.cap = s->cap;
    v.trainable = s->trainable;
    v.fn = s->fn;
    v.derivative = s->derivative;
    v.name = s->name;
    out.push_back(std::move(v));
  }
  return out;
}

std::int64_t ScoreMod::num_parameter_steps() const {
  std::int64_t n = 0;
  for (const auto& s : steps_) n += s->has_parameters() ? 1 : 0;
  return n;
}

std::vector<std::vector<std::int64_t>> ScoreMod::parameter_shapes() const {
  std::vector<std::vector<std::int64_t>> shapes;
  for (const auto& s : steps_) {
    const auto n = static_cast<std::int64_t>(s->table.size());
    if (s->kind == Step::Kind::relative_bias) shapes.push_back({n / (2 * s->radius + 1), 2 * s->radius + 1});
    if (s->kind == Step::Kind::alibi) shapes.push_back({n});
    if (s->kind == Step::Kind::softcap && s->trainable) shapes.push_back({1});
  }
  return shapes;
}

void ScoreMod::accumulate_parameter_grads(std::int64_t, std::int64_t h, std::int64_t q0, std::int64_t nq,
                                          std::int64_t k0, std::int64_t nk, const float* ds,
                                          const float* const* suffix, std::int64_t ld, double* const* grads) const {
  std::int64_t p = 0;
  for (const auto& st : steps_) {
    if (!st->has_parameters()) continue;
    double* g = grads[p];
    const float* su = suffix[p];
    ++p;
    for (std::int64_t i = 0; i < nq; ++i) {
      const float* d = ds + i * ld;
      const float* w = su + i * ld;
      const std::int64_t q = q0 + i;
      if (st->kind == Step::Kind::softcap) {
        // suffix is d out / d cap already
        double sum = 0;
        for (std::int64_t j = 0; j < nk; ++j)
          if (d[j] != 0.0f) sum += static_cast<double>(d[j] * w[j]);
        g[0] += sum;
      } else if (st->kind == Step::Kind::alibi) {
        // d(score + slope (kv - q)) / d slope = kv - q
        double sum = 0;
        for (std::int64_t j = 0; j < nk; ++j)
          if (d[j] != 0.0f) sum += static_cast<double>(d[j] * w[j]) * static_cast<double>(k0 + j - q);
        g[h] += sum;
      } else {
        // The bias entry of (q, kv) depends only on q - kv: each entry collects one diagonal.
        for (std::int64_t j = 0; j < nk; ++j)
          if (d[j] != 0.0f) g[st->bias_index(h, q - (k0 + j))] += static_cast<double>(d[j] * w[j]);
      }
    }
  }
}

}  // namespace lmcore::attention
