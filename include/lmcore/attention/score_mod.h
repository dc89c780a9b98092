// lmcore/attention/score_mod.h — functions applied to each attention score before the softmax.
//
// The score is scale * (q . k); a ScoreMod maps it to a new score given (b, h, q_idx, kv_idx). Mods
// chain left to right with then(). The built-ins know their derivative with respect to the score, so
// flex_attention_backward carries the gradient through them to q and k; a callable needs its
// derivative passed alongside for the backward pass (the forward works without it).
//
//   ScoreMod m = ScoreMod::alibi(slopes).then(ScoreMod::softcap(30.0));
//
// Built-ins:
//   relative_position_bias(bias, R)  score + bias[h][clamp(q - kv, -R, R) + R]; bias is [H or 1][2R + 1]
//   alibi(slopes)                    score + slopes[h] * (kv - q)   (slopes has one entry per query head)
//   softcap(cap)                     cap * tanh(score / cap)
//   softcap(cap, /*trainable=*/true) the same, with the cap a parameter (shape {1})
//   from_function(f, df)             f(score, b, h, q, kv); df gives d f / d score (optional)
//
// Parameters: the bias table, the slopes and a trainable softcap's cap. The parameter steps, in chain order, are
// what parameter_shapes() lists and what flex_attention_backward returns gradients for
// (FlexGrads::score_mod_grads), each flattened like its table.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace lmcore::attention {

// In f64: the f32 kernels pass the f32 score (exactly) and round the result to f32, the f64 kernels keep
// every bit; a lambda written for float(float, ...) converts to it and gives the same f32 results.
using ScoreFunction =
    std::function<double(double score, std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx)>;

// One step of a chain as plain data: what ScoreMod::steps() returns for code that evaluates the chain
// from its definition instead of through apply() (the naive reference in reference.h does, so that it
// shares no arithmetic with the kernels it checks).
struct ScoreModStep {
  enum class Kind { relative_bias, alibi, softcap, function } kind = Kind::function;
  std::vector<double> table;  // relative_bias: [rows][2 * radius + 1] (rows 1 or one per head); alibi: slopes
  std::int64_t radius = 0;    // relative_bias
  double cap = 0;             // softcap
  bool trainable = false;    // softcap: the cap is a parameter
  ScoreFunction fn, derivative;  // function (derivative may be empty)
  std::string name;              // function
};

class ScoreMod {
 public:
  ScoreMod() = default;  // identity

  // Tables and caps are kept in f64 as given; the f32 kernels use them rounded to f32 (once, at
  // construction), the f64 kernels and the reference as they are. (The initializer_list overloads
  // keep alibi({0.5f, 0.25f}) unambiguous between the float and double vectors.)
  static ScoreMod relative_position_bias(std::vector<double> bias, std::int64_t max_distance);
  static ScoreMod relative_position_bias(const std::vector<float>& bias, std::int64_t max_distance);
  static ScoreMod relative_position_bias(std::initializer_list<double> bias, std::int64_t max_distance);
  static ScoreMod alibi(std::vector<double> slopes);
  static ScoreMod alibi(const std::vector<float>& slopes);
  static ScoreMod alibi(std::initializer_list<double> slopes);
  static ScoreMod softcap(double cap, bool trainable = false);
  static ScoreMod from_function(ScoreFunction fn, ScoreFunction derivative = {}, std::string name = "user");
  // The standard ALiBi slopes for n heads: 2^(-8 (i + 1) / n).
  static std::vector<float> alibi_slopes(std::int64_t heads);

  // Applies this, then next.
  ScoreMod then(const ScoreMod& next) const;

  bool is_identity() const { return steps_.empty(); }
  bool has_derivative() const;
  bool has_callable() const;
  std::string describe() const;

  // One element: the modified score, and d(modified)/d(score) in *derivative when not null.
  // When suffix is not null, suffix[p] receives d(modified)/d(output of parameter step p), p in chain
  // order (num_parameter_steps() entries). The float overloads compute as the f32 kernels do (tables
  // rounded to f32), the double ones as the f64 kernels do.
  float apply(float score, std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx,
              float* derivative = nullptr, float* suffix = nullptr) const;
  double apply(double score, std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx,
               double* derivative = nullptr, double* suffix = nullptr) const;
  // A tile s[i * ld + j] for positions (q0 + i, k0 + j), in place. When deriv is not null it receives
  // d(modified)/d(score) for each element (same layout). Throws when deriv is asked of a callable
  // without a derivative. When suffix is not null, the tile suffix[p] (same layout) receives
  // d(modified)/d(output of parameter step p) for each parameter step p.
  void apply_tile(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
                  float* s, std::int64_t ld, float* deriv, float* const* suffix = nullptr) const;
  void apply_tile(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
                  double* s, std::int64_t ld, double* deriv, double* const* suffix = nullptr) const;

  // The steps with trainable parameters, in chain order: relative_position_bias {rows, 2R + 1}, alibi
  // {number of slopes}, a trainable softcap {1}.
  std::int64_t num_parameter_steps() const;
  std::vector<std::vector<std::int64_t>> parameter_shapes() const;
  // Backward into the parameters for a tile: ds[i * ld + j] = d loss / d(modified score) and suffix
  // from apply_tile, at (q0 + i, k0 + j). Adds d loss / d table into grads[p] (flat, as the table),
  // for each parameter step p. Elements with ds == 0 (masked, or zero probability) add nothing.
  void accumulate_parameter_grads(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                                  std::int64_t nk, const float* ds, const float* const* suffix, std::int64_t ld,
                                  double* const* grads) const;
  void accumulate_parameter_grads(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                                  std::int64_t nk, const double* ds, const double* const* suffix, std::int64_t ld,
                                  double* const* grads) const;
  // Checks that head indices up to heads - 1 are covered by per-head tables; names `op`.
  void check_heads(std::int64_t heads, const char* op) const;
  // The chain, first step first.
  std::vector<ScoreModStep> steps() const;

  struct Step;

 private:
  std::vector<std::shared_ptr<const Step>> steps_;
};

}  // namespace lmcore::attention
