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
  ScoreFunction fn, derivative;
  std::string name;

  float bias_at(std::int64_t h, std::int64_t rel) const {
    const std::int64_t width = 2 * radius + 1;
    const std::int64_t heads = static_cast<std::int64_t>(table.size()) / width;
    const std::int64_t row = heads == 1 ? 0 : h;
    return table[static_cast<std::size_t>(row * width + std::clamp(rel, -radius, radius) + radius)];
  }
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

ScoreMod ScoreMod::softcap(float cap) {
  LMCORE_CHECK(cap > 0 && std::isfinite(cap), "ScoreMod::softcap: expected a finite cap > 0, found {}", cap);
  auto s = std::make_shared<Step>();
  s->kind = Step::Kind::softcap;
  s->cap = cap;
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
      case Step::Kind::softcap: out += fmt::format("softcap({})", s->cap); break;
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
                      float* derivative) const {
  float d = 1.0f;
  for (const auto& s : steps_) {
    switch (s->kind) {
      case Step::Kind::relative_bias: score += s->bias_at(h, q_idx - kv_idx); break;
      case Step::Kind::alibi: score += s->table[static_cast<std::size_t>(h)] * static_cast<float>(kv_idx - q_idx); break;
      case Step::Kind::softcap: {
        const float t = std::tanh(score / s->cap);
        score = s->cap * t;
        d *= 1.0f - t * t;
        break;
      }
      case Step::Kind::function:
        if (derivative != nullptr) {
          LMCORE_CHECK(static_cast<bool>(s->derivative),
                       "flex_attention_backward: score_mod '{}' is a callable without a derivative; pass one to "
                       "ScoreMod::from_function for the backward pass",
                       s->name);
          d *= s->derivative(score, b, h, q_idx, kv_idx);
        }
        score = s->fn(score, b, h, q_idx, kv_idx);
        break;
    }
  }
  if (derivative != nullptr) *derivative = d;
  return score;
}

void ScoreMod::apply_tile(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                          std::int64_t nk, float* s, std::int64_t ld, float* deriv) const {
  if (deriv != nullptr)
    for (std::int64_t i = 0; i < nq; ++i) std::fill_n(deriv + i * ld, nk, 1.0f);
  for (const auto& st : steps_) {
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
            row[j] = st->cap * t;
            if (drow != nullptr) drow[j] *= 1.0f - t * t;
          }
          break;
        }
        case Step::Kind::function:
          LMCORE_CHECK(drow == nullptr || static_cast<bool>(st->derivative),
                       "flex_attention_backward: score_mod '{}' is a callable without a derivative; pass one to "
                       "ScoreMod::from_function for the backward pass",
                       st->name);
          for (std::int64_t j = 0; j < nk; ++j) {
            if (drow != nullptr) drow[j] *= st->derivative(row[j], b, h, q, k0 + j);
            row[j] = st->fn(row[j], b, h, q, k0 + j);
          }
          break;
      }
    }
  }
}

}  // namespace lmcore::attention
