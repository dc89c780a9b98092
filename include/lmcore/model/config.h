// lmcore/model/config.h — the shape and options of a Llama-style decoder-only transformer.
//
// Stored as the config.json of a Hugging Face Llama checkpoint (the fields transformers'
// LlamaConfig reads), plus lmcore's training-time options under their own keys:
//
//   { "architectures": ["LlamaForCausalLM"], "model_type": "llama",
//     "vocab_size": 8192, "hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 6,
//     "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 256,
//     "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": true, "hidden_act": "silu",
//     "bos_token_id": 8191, "eos_token_id": 8191,
//     "lmcore_attention_mask": "causal" | "sliding_window" | "document", "sliding_window": 128,
//     "lmcore_z_loss": 0.0, "lmcore_logit_softcap": 0.0, "lmcore_label_smoothing": 0.0 }
//
// Attention masks: causal; sliding_window W (causal and q - kv <= W, attention-gym's definition, as
// MaskMod::sliding_window); document: causal within documents, where a document starts at every
// eos_token_id in the batch (llm.c puts the end-of-text token before each document).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lmcore::model {

enum class AttentionMask : std::uint8_t { causal = 0, sliding_window = 1, document = 2 };
std::string_view attention_mask_name(AttentionMask m);

struct ModelConfig {
  std::int64_t vocab_size = 8192;
  std::int64_t dim = 384;          // hidden_size
  std::int64_t n_layers = 6;       // num_hidden_layers
  std::int64_t n_heads = 6;        // num_attention_heads
  std::int64_t n_kv_heads = 2;     // num_key_value_heads (grouped-query attention when < n_heads)
  std::int64_t ffn_dim = 1024;     // intermediate_size of the SwiGLU MLP
  std::int64_t max_seq_len = 256;  // max_position_embeddings
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  AttentionMask mask = AttentionMask::causal;
  std::int64_t sliding_window = 0;  // W, for AttentionMask::sliding_window
  std::int64_t eos_token_id = -1;   // the document separator, for AttentionMask::document (and generate)
  std::int64_t bos_token_id = -1;
  // Loss options of the output head (see lmcore/loss/cross_entropy.h).
  double z_loss = 0.0;
  double logit_softcap = 0.0;
  double label_smoothing = 0.0;

  std::int64_t head_dim() const { return dim / n_heads; }
  std::int64_t q_dim() const { return n_heads * head_dim(); }
  std::int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // Parameters, counting a tied embedding once.
  std::int64_t num_parameters() const;

  // Throws Error naming the field, the value and the rule for every impossible combination
  // (dim not divisible by heads, heads not a multiple of kv_heads, odd head_dim for RoPE, ...).
  void validate() const;

  // config.json (Hugging Face Llama fields + lmcore_*). `source` names the file in errors. Unknown keys
  // are an error unless transformers writes them without changing the model (a list in config.cpp).
  static ModelConfig from_json(std::string_view text, const std::string& source);
  static ModelConfig from_file(const std::string& path);
  std::string to_json() const;
};

}  // namespace lmcore::model
