// The built-in score modifiers and their derivatives. See lmcore/attention/score_mod.h.
#include "lmcore/attention/score_mod.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "lmcore/core/error.h"

namespace lmcore::attention {

struct ScoreMod::Step {
  enum class Kind { relative_bias, alibi, softcap, function } kind;
  std::vector<double> table;  // relative_bias: [heads][2R + 1]; alibi: slopes (as given)
  std::vector<float> table_f;  // the same rounded to f32, for the f32 kernels
  std::int64_t radius = 0;     // relative_bias
  double cap = 0;              // softcap
  float cap_f = 0;
  bool trainable = false;      // softcap: the cap is a parameter
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
  // T = float: the f32 copies; T = double: the values as given.
  template <typename T>
  const T* values() const {
    if constexpr (std::is_same_v<T, float>) return table_f.data();
    else return table.data();
  }
  template <typename T>
  T cap_as() const {
    if constexpr (std::is_same_v<T, float>) return cap_f;
    else return cap;
  }
  template <typename T>
  T bias_at(std::int64_t h, std::int64_t rel) const {
    return values<T>()[bias_index(h, rel)];
  }
};

namespace {

std::shared_ptr<ScoreMod::Step> table_step(ScoreMod::Step::Kind kind, std::vector<double> table) {
  auto s = std::make_shared<ScoreMod::Step>();
  s->kind = kind;
  s->table_f.assign(table.begin(), table.end());
  s->table = std::move(table);
  return s;
}

}  // namespace

ScoreMod ScoreMod::relative_position_bias(std::vector<double> bias, std::int64_t max_distance) {
  LMCORE_CHECK(max_distance >= 0, "ScoreMod::relative_position_bias: expected max_distance >= 0, found {}",
               max_distance);
  const std::int64_t width = 2 * max_distance + 1;
  LMCORE_CHECK(!bias.empty() && static_cast<std::int64_t>(bias.size()) % width == 0,
               "ScoreMod::relative_position_bias: expected [heads][2 * {} + 1] = heads x {} values, found {}",
               max_distance, width, bias.size());
  auto s = table_step(Step::Kind::relative_bias, std::move(bias));
  s->radius = max_distance;
  ScoreMod m;
  m.steps_.push_back(std::move(s));
  return m;
}

ScoreMod ScoreMod::relative_position_bias(const std::vector<float>& bias, std::int64_t max_distance) {
  return relative_position_bias(std::vector<double>(bias.begin(), bias.end()), max_distance);
}

ScoreMod ScoreMod::relative_position_bias(std::initializer_list<double> bias, std::int64_t max_distance) {
  return relative_position_bias(std::vector<double>(bias), max_distance);
}

ScoreMod ScoreMod::alibi(std::vector<double> slopes) {
  LMCORE_CHECK(!slopes.empty(), "ScoreMod::alibi: expected one slope per head, found none");
  ScoreMod m;
  m.steps_.push_back(table_step(Step::Kind::alibi, std::move(slopes)));
  return m;
}

ScoreMod ScoreMod::alibi(const std::vector<float>& slopes) {
  return alibi(std::vector<double>(slopes.begin(), slopes.end()));
}

ScoreMod ScoreMod::alibi(std::initializer_list<double> slopes) { return alibi(std::vector<double>(slopes)); }

std::vector<float> ScoreMod::alibi_slopes(std::int64_t heads) {
  LMCORE_CHECK(heads >= 1, "ScoreMod::alibi_slopes: expected heads >= 1, found {}", heads);
  std::vector<float> slopes(static_cast<std::size_t>(heads));
  for (std::int64_t i = 0; i < heads; ++i)
    slopes[static_cast<std::size_t>(i)] = static_cast<float>(std::exp2(-8.0 * static_cast<double>(i + 1) / heads));
  return slopes;
}

ScoreMod ScoreMod::softcap(double cap, bool trainable) {
  // The f32 kernels divide by the cap rounded to f32: it must stay a finite, positive f32 too.
  const float cap_f = static_cast<float>(cap);
  LMCORE_CHECK(cap > 0 && std::isfinite(cap) && cap_f > 0 && std::isfinite(cap_f),
               "ScoreMod::softcap: expected a finite cap > 0 (within f32's range), found {}", cap);
  auto s = std::make_shared<Step>();
  s->kind = Step::Kind::softcap;
  s->cap = cap;
  s->cap_f = cap_f;
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
      case Step::Kind::softcap: out += fmt::format("softcap({}{})", s->cap_f, s->trainable ? ", trainable" : ""); break;
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

namespace {

using Steps = std::vector<std::shared_ptr<const ScoreMod::Step>>;
using Kind = ScoreMod::Step::Kind;

// T = float: as the f32 kernels compute (f32 tables and cap, f32 arithmetic); T = double: the f64 kernels.
template <typename T>
T apply_steps(const Steps& steps, T score, std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx,
              T* derivative, T* suffix) {
  T d = 1;
  std::int64_t params = 0;  // parameter steps passed so far
  // A step with derivative g multiplies d and the suffix of every parameter step before it.
  auto chain = [&](T g) {
    d *= g;
    if (suffix != nullptr)
      for (std::int64_t p = 0; p < params; ++p) suffix[p] *= g;
  };
  for (const auto& s : steps) {
    switch (s->kind) {
      case Kind::relative_bias: score += s->template bias_at<T>(h, q_idx - kv_idx); break;
      case Kind::alibi: score += s->template values<T>()[h] * static_cast<T>(kv_idx - q_idx); break;
      case Kind::softcap: {
        const T cap = s->template cap_as<T>();
        const T x = score, t = std::tanh(score / cap);
        score = cap * t;
        chain(T(1) - t * t);
        // d(c tanh(x / c)) / dc = tanh(x / c) - (x / c)(1 - tanh^2(x / c))
        if (s->trainable && suffix != nullptr) suffix[params] = t - x / cap * (T(1) - t * t);
        break;
      }
      case Kind::function:
        if (derivative != nullptr || suffix != nullptr) {
          LMCORE_CHECK(static_cast<bool>(s->derivative),
                       "flex_attention_backward: score_mod '{}' is a callable without a derivative; pass one to "
                       "ScoreMod::from_function for the backward pass",
                       s->name);
          chain(static_cast<T>(s->derivative(score, b, h, q_idx, kv_idx)));
        }
        score = static_cast<T>(s->fn(score, b, h, q_idx, kv_idx));
        break;
    }
    if (s->additive() && suffix != nullptr) suffix[params] = 1;
    if (s->has_parameters()) ++params;
  }
  if (derivative != nullptr) *derivative = d;
  return score;
}

template <typename T>
void apply_steps_tile(const Steps& steps, std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq,
                      std::int64_t k0, std::int64_t nk, T* s, std::int64_t ld, T* deriv, T* const* suffix) {
  if (deriv != nullptr)
    for (std::int64_t i = 0; i < nq; ++i) std::fill_n(deriv + i * ld, nk, T(1));
  std::int64_t params = 0;  // parameter steps passed so far
  for (const auto& st : steps) {
    if (st->has_parameters() && suffix != nullptr)
      for (std::int64_t i = 0; i < nq; ++i) std::fill_n(suffix[params] + i * ld, nk, T(1));
    // Later steps with a derivative other than 1 chain into the suffix of every earlier parameter step.
    const bool chains = suffix != nullptr && params > 0 && !st->additive();
    // A trainable softcap's own suffix is d out / d cap (set below), not 1.
    const bool cap_grad = suffix != nullptr && st->kind == Kind::softcap && st->trainable;
    for (std::int64_t i = 0; i < nq; ++i) {
      T* row = s + i * ld;
      T* drow = deriv != nullptr ? deriv + i * ld : nullptr;
      const std::int64_t q = q0 + i;
      switch (st->kind) {
        case Kind::relative_bias:
          for (std::int64_t j = 0; j < nk; ++j) row[j] += st->template bias_at<T>(h, q - (k0 + j));
          break;
        case Kind::alibi: {
          const T slope = st->template values<T>()[h];
          for (std::int64_t j = 0; j < nk; ++j) row[j] += slope * static_cast<T>(k0 + j - q);
          break;
        }
        case Kind::softcap: {
          const T cap = st->template cap_as<T>();
          const T inv = T(1) / cap;
          for (std::int64_t j = 0; j < nk; ++j) {
            const T t = std::tanh(row[j] * inv);
            if (cap_grad) suffix[params][i * ld + j] = t - row[j] * inv * (T(1) - t * t);
            row[j] = cap * t;
            if (drow != nullptr) drow[j] *= T(1) - t * t;
            if (chains)
              for (std::int64_t p = 0; p < params; ++p) suffix[p][i * ld + j] *= T(1) - t * t;
          }
          break;
        }
        case Kind::function:
          LMCORE_CHECK((drow == nullptr && !chains) || static_cast<bool>(st->derivative),
                       "flex_attention_backward: score_mod '{}' is a callable without a derivative; pass one to "
                       "ScoreMod::from_function for the backward pass",
                       st->name);
          for (std::int64_t j = 0; j < nk; ++j) {
            if (drow != nullptr || chains) {
              const T g = static_cast<T>(st->derivative(row[j], b, h, q, k0 + j));
              if (drow != nullptr) drow[j] *= g;
              if (chains)
                for (std::int64_t p = 0; p < params; ++p) suffix[p][i * ld + j] *= g;
            }
            row[j] = static_cast<T>(st->fn(row[j], b, h, q, k0 + j));
          }
          break;
      }
    }
    if (st->has_parameters()) ++params;
  }
}

template <typename T>
void accumulate_steps(const Steps& steps, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                      std::int64_t nk, const T* ds, const T* const* suffix, std::int64_t ld, double* const* grads) {
  std::int64_t p = 0;
  for (const auto& st : steps) {
    if (!st->has_parameters()) continue;
    double* g = grads[p];
    const T* su = suffix[p];
    ++p;
    for (std::int64_t i = 0; i < nq; ++i) {
      const T* d = ds + i * ld;
      const T* w = su + i * ld;
      const std::int64_t q = q0 + i;
      if (st->kind == Kind::softcap) {
        // suffix is d out / d cap already
        double sum = 0;
        for (std::int64_t j = 0; j < nk; ++j)
          if (d[j] != T(0)) sum += static_cast<double>(d[j] * w[j]);
        g[0] += sum;
      } else if (st->kind == Kind::alibi) {
        // d(score + slope (kv - q)) / d slope = kv - q
        double sum = 0;
        for (std::int64_t j = 0; j < nk; ++j)
          if (d[j] != T(0)) sum += static_cast<double>(d[j] * w[j]) * static_cast<double>(k0 + j - q);
        g[h] += sum;
      } else {
        // The bias entry of (q, kv) depends only on q - kv: each entry collects one diagonal.
        for (std::int64_t j = 0; j < nk; ++j)
          if (d[j] != T(0)) g[st->bias_index(h, q - (k0 + j))] += static_cast<double>(d[j] * w[j]);
      }
    }
  }
}

}  // namespace

float ScoreMod::apply(float score, std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx,
                      float* derivative, float* suffix) const {
  return apply_steps(steps_, score, b, h, q_idx, kv_idx, derivative, suffix);
}

double ScoreMod::apply(double score, std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx,
                       double* derivative, double* suffix) const {
  return apply_steps(steps_, score, b, h, q_idx, kv_idx, derivative, suffix);
}

void ScoreMod::apply_tile(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                          std::int64_t nk, float* s, std::int64_t ld, float* deriv, float* const* suffix) const {
  apply_steps_tile(steps_, b, h, q0, nq, k0, nk, s, ld, deriv, suffix);
}

void ScoreMod::apply_tile(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                          std::int64_t nk, double* s, std::int64_t ld, double* deriv, double* const* suffix) const {
  apply_steps_tile(steps_, b, h, q0, nq, k0, nk, s, ld, deriv, suffix);
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
  accumulate_steps(steps_, h, q0, nq, k0, nk, ds, suffix, ld, grads);
}

void ScoreMod::accumulate_parameter_grads(std::int64_t, std::int64_t h, std::int64_t q0, std::int64_t nq,
                                          std::int64_t k0, std::int64_t nk, const double* ds,
                                          const double* const* suffix, std::int64_t ld, double* const* grads) const {
  accumulate_steps(steps_, h, q0, nq, k0, nk, ds, suffix, ld, grads);
}

}  // namespace lmcore::attention
