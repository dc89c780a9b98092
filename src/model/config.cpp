#include "lmcore/model/config.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"

namespace lmcore::model {

using json = nlohmann::json;

std::string_view attention_mask_name(AttentionMask m) {
  switch (m) {
    case AttentionMask::causal: return "causal";
    case AttentionMask::sliding_window: return "sliding_window";
    case AttentionMask::document: return "document";
  }
  return "?";
}

std::int64_t ModelConfig::num_parameters() const {
  const std::int64_t per_layer = dim * (q_dim() + 2 * kv_dim()) + q_dim() * dim + 3 * dim * ffn_dim + 2 * dim;
  return vocab_size * dim * (tie_embeddings ? 1 : 2) + n_layers * per_layer + dim;
}

void ModelConfig::validate() const {
  auto positive = [](const char* name, std::int64_t v) {
    LMCORE_CHECK(v >= 1, "model config: {} must be >= 1, found {}", name, v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size (dim)", dim);
  positive("num_hidden_layers", n_layers);
  positive("num_attention_heads", n_heads);
  positive("num_key_value_heads", n_kv_heads);
  positive("intermediate_size (ffn_dim)", ffn_dim);
  positive("max_position_embeddings (max_seq_len)", max_seq_len);
  LMCORE_CHECK(vocab_size <= (std::int64_t{1} << 31), "model config: vocab_size {} exceeds 2^31", vocab_size);
  LMCORE_CHECK(dim % n_heads == 0, "model config: hidden_size {} is not divisible by num_attention_heads {}", dim,
               n_heads);
  LMCORE_CHECK(n_heads % n_kv_heads == 0,
               "model config: num_attention_heads {} is not a multiple of num_key_value_heads {}", n_heads, n_kv_heads);
  LMCORE_CHECK(head_dim() % 2 == 0, "model config: head dim hidden_size / num_attention_heads = {} must be even (RoPE)",
               head_dim());
  LMCORE_CHECK(head_dim() <= 256, "model config: head dim {} exceeds flex attention's limit of 256", head_dim());
  LMCORE_CHECK(std::isfinite(rope_theta) && rope_theta > 1.0, "model config: rope_theta must be > 1, found {}",
               rope_theta);
  LMCORE_CHECK(std::isfinite(norm_eps) && norm_eps > 0.0 && norm_eps < 1.0,
               "model config: rms_norm_eps must be in (0, 1), found {}", norm_eps);
  if (mask == AttentionMask::sliding_window)
    LMCORE_CHECK(sliding_window >= 1, "model config: attention mask sliding_window needs sliding_window >= 1, found {}",
                 sliding_window);
  if (mask == AttentionMask::document)
    LMCORE_CHECK(eos_token_id >= 0 && eos_token_id < vocab_size,
                 "model config: attention mask 'document' needs eos_token_id in [0, vocab_size = {}), found {}",
                 vocab_size, eos_token_id);
  if (eos_token_id >= 0)
    LMCORE_CHECK(eos_token_id < vocab_size, "model config: eos_token_id {} is >= vocab_size {}", eos_token_id,
                 vocab_size);
  if (bos_token_id >= 0)
    LMCORE_CHECK(bos_token_id < vocab_size, "model config: bos_token_id {} is >= vocab_size {}", bos_token_id,
                 vocab_size);
  LMCORE_CHECK(std::isfinite(z_loss) && z_loss >= 0.0, "model config: lmcore_z_loss must be >= 0, found {}", z_loss);
  LMCORE_CHECK(std::isfinite(logit_softcap) && logit_softcap >= 0.0,
               "model config: lmcore_logit_softcap must be >= 0 (0 disables), found {}", logit_softcap);
  LMCORE_CHECK(std::isfinite(label_smoothing) && label_smoothing >= 0.0 && label_smoothing <= 1.0,
               "model config: lmcore_label_smoothing must be in [0, 1], found {}", label_smoothing);
}

namespace {

// Keys transformers writes into a Llama config.json that do not change the model lmcore builds (or whose
// only supported value is checked below).
const std::set<std::string>& ignored_keys() {
  static const std::set<std::string> keys = {
      "architectures", "model_type", "torch_dtype", "transformers_version", "initializer_range", "use_cache",
      "pretraining_tp", "pad_token_id", "attention_dropout", "hidden_act", "attention_bias", "mlp_bias",
      "rope_scaling", "head_dim", "_name_or_path", "lmcore_version"};
  return keys;
}

template <typename T>
T get(const json& j, const char* key, const std::string& source) {
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    fail("{}: '{}' has the wrong type: expected {}, found {}", source, key,
         std::is_same_v<T, bool> ? "a boolean" : (std::is_integral_v<T> ? "an integer" : "a number"),
         j.at(key).dump());
  }
}

}  // namespace

ModelConfig ModelConfig::from_json(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double's range
    fail("{}: not valid JSON: {}", source, e.what());
  }
  LMCORE_CHECK(j.is_object(), "{}: expected a JSON object, found {}", source, j.type_name());
  ModelConfig c;
  static const std::set<std::string> known = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
      "bos_token_id", "eos_token_id", "sliding_window", "lmcore_attention_mask", "lmcore_z_loss",
      "lmcore_logit_softcap", "lmcore_label_smoothing"};
  for (const auto& [key, value] : j.items()) {
    if (known.count(key) || ignored_keys().count(key)) continue;
    fail("{}: unknown key '{}' (a typo? the keys lmcore reads are those of transformers' LlamaConfig: hidden_size, "
         "num_hidden_layers, ...)",
         source, key);
  }
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"})
    LMCORE_CHECK(j.contains(key), "{}: missing required key '{}'", source, key);
  c.vocab_size = get<std::int64_t>(j, "vocab_size", source);
  c.dim = get<std::int64_t>(j, "hidden_size", source);
  c.ffn_dim = get<std::int64_t>(j, "intermediate_size", source);
  c.n_layers = get<std::int64_t>(j, "num_hidden_layers", source);
  c.n_heads = get<std::int64_t>(j, "num_attention_heads", source);
  c.n_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? get<std::int64_t>(j, "num_key_value_heads", source)
                     : c.n_heads;
  if (j.contains("max_position_embeddings")) c.max_seq_len = get<std::int64_t>(j, "max_position_embeddings", source);
  if (j.contains("rope_theta")) c.rope_theta = get<double>(j, "rope_theta", source);
  if (j.contains("rms_norm_eps")) c.norm_eps = get<double>(j, "rms_norm_eps", source);
  c.tie_embeddings = j.contains("tie_word_embeddings") ? get<bool>(j, "tie_word_embeddings", source) : false;
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) c.eos_token_id = get<std::int64_t>(j, "eos_token_id", source);
  if (j.contains("bos_token_id") && !j["bos_token_id"].is_null()) c.bos_token_id = get<std::int64_t>(j, "bos_token_id", source);
  if (j.contains("hidden_act"))
    LMCORE_CHECK(j["hidden_act"] == "silu", "{}: hidden_act {} is not supported, expected \"silu\" (SwiGLU)", source,
                 j["hidden_act"].dump());
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.contains(key)) LMCORE_CHECK(j[key] == false, "{}: {} = {} is not supported, expected false", source, key, j[key].dump());
  if (j.contains("rope_scaling"))
    LMCORE_CHECK(j["rope_scaling"].is_null(), "{}: rope_scaling {} is not supported, expected null", source,
                 j["rope_scaling"].dump());
  if (j.contains("head_dim") && !j["head_dim"].is_null())
    LMCORE_CHECK(j["head_dim"] == c.dim / std::max<std::int64_t>(c.n_heads, 1),
                 "{}: head_dim {} is not supported, expected hidden_size / num_attention_heads = {}", source,
                 j["head_dim"].dump(), c.dim / std::max<std::int64_t>(c.n_heads, 1));
  std::string mask = "causal";
  if (j.contains("lmcore_attention_mask")) {
    LMCORE_CHECK(j["lmcore_attention_mask"].is_string(), "{}: lmcore_attention_mask must be a string, found {}", source,
                 j["lmcore_attention_mask"].dump());
    mask = j["lmcore_attention_mask"].get<std::string>();
  }
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    c.sliding_window = get<std::int64_t>(j, "sliding_window", source);
    if (!j.contains("lmcore_attention_mask")) mask = "sliding_window";  // a Mistral-style config
  }
  if (mask == "causal") c.mask = AttentionMask::causal;
  else if (mask == "sliding_window") c.mask = AttentionMask::sliding_window;
  else if (mask == "document") c.mask = AttentionMask::document;
  else fail("{}: lmcore_attention_mask \"{}\" is not one of causal, sliding_window, document", source, mask);
  if (j.contains("lmcore_z_loss")) c.z_loss = get<double>(j, "lmcore_z_loss", source);
  if (j.contains("lmcore_logit_softcap")) c.logit_softcap = get<double>(j, "lmcore_logit_softcap", source);
  if (j.contains("lmcore_label_smoothing")) c.label_smoothing = get<double>(j, "lmcore_label_smoothing", source);
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  // Regular files only (a FIFO would block), at most 1 MiB: a config is a few hundred bytes.
  return from_json(base::read_file(path, "model config", std::size_t{1} << 20), path);
}

std::string ModelConfig::to_json() const {
  json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = dim;
  j["intermediate_size"] = ffn_dim;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["max_position_embeddings"] = max_seq_len;
  j["rope_theta"] = rope_theta;
  j["rms_norm_eps"] = norm_eps;
  j["tie_word_embeddings"] = tie_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["rope_scaling"] = nullptr;
  j["torch_dtype"] = "float32";
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_id >= 0 ? json(eos_token_id) : json(nullptr);
  j["sliding_window"] = mask == AttentionMask::sliding_window ? json(sliding_window) : json(nullptr);
  j["lmcore_attention_mask"] = std::string(attention_mask_name(mask));
  j["lmcore_z_loss"] = z_loss;
  j["lmcore_logit_softcap"] = logit_softcap;
  j["lmcore_label_smoothing"] = label_smoothing;
  return j.dump(2) + "\n";
}

}  // namespace lmcore::model
