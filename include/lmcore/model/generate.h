// lmcore/model/generate.h — sampling from a trained model with a KV cache.
//
// One token at a time: each layer's keys and values of earlier positions are kept (the KV cache), so a
// new token costs one pass over the weights plus attention over the cache, not a forward of the whole
// sequence. The attention mask of the config applies (causal; sliding window; document: a new document
// starts at each eos token). Arithmetic is f32, so the logits equal the training forward's
// (Llama::logits) to f32 rounding; the tests check that position by position.
//
//   Generator g(config, params);                     // params: flat f32, ParameterLayout(config)
//   SampleOptions o;  o.max_tokens = 100;  o.temperature = 0.8;  o.top_k = 40;  o.seed = 1;
//   std::vector<int32_t> out = g.generate(prompt_ids, o, [](int32_t id) { ... print ... });
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lmcore/core/tensor.h"
#include "lmcore/model/config.h"
#include "lmcore/model/layers.h"
#include "lmcore/model/parameters.h"

namespace lmcore::model {

struct SampleOptions {
  std::int64_t max_tokens = 128;
  double temperature = 0.8;  // 0: greedy (argmax)
  std::int64_t top_k = 50;   // 0: the whole vocabulary
  std::uint64_t seed = 0;
  bool stop_at_eos = true;   // stop after sampling config.eos_token_id
};

class Generator {
 public:
  // max_len: the longest sequence (prompt + generated) the cache holds; 0 means config.max_seq_len.
  Generator(const ModelConfig& config, const Tensor& params, std::int64_t max_len = 0);

  // Feeds one token at the next position; returns the logits (vocab) for the token after it.
  const std::vector<float>& feed(std::int32_t token);
  // Clears the cache (position 0 again).
  void reset();
  std::int64_t position() const { return pos_; }

  // Feeds the prompt (non-empty), then samples up to max_tokens tokens, calling on_token for each as it
  // is chosen. Stops early at eos (when asked) or when the cache is full. Returns the sampled tokens.
  std::vector<std::int32_t> generate(const std::vector<std::int32_t>& prompt, const SampleOptions& options,
                                     const std::function<void(std::int32_t)>& on_token = {});

  // The sampling rule on its own: temperature, then top-k, then a draw from the softmax with `u` in
  // [0, 1) (argmax when temperature is 0).
  static std::int32_t sample(const std::vector<float>& logits, double temperature, std::int64_t top_k, double u);

 private:
  ModelConfig config_;
  ParameterLayout layout_;
  Tensor params_;
  std::int64_t max_len_, pos_ = 0;
  RopeTable rope_;
  std::vector<float> k_cache_, v_cache_;  // (layers, max_len, kv_dim)
  std::vector<std::int64_t> doc_start_;   // per position: where its document starts
  std::vector<float> x_, h_, qkv_, att_, y_, gu_, a_, logits_, rstd_, scores_;
};

}  // namespace lmcore::model
