// lmcore/model/parameters.h — where every parameter of the model lives in one flat f32 buffer.
//
// The buffer is cut into sharding units (FSDP's unit of all-gather and reduce-scatter): unit 0 is the
// root (token embedding, final norm and, when not tied, the output head), unit 1 + l is transformer
// block l. Inside a block the q, k and v projections are adjacent rows of one [q_dim + 2 kv_dim, dim]
// matrix and gate/up of one [2 ffn, dim] matrix, so each pair is one GEMM; the names are those of a
// Hugging Face Llama checkpoint:
//
//   model.embed_tokens.weight                      [vocab, dim]          unit 0
//   model.norm.weight                              [dim]                 unit 0
//   lm_head.weight                                 [vocab, dim]          unit 0 (absent when tied)
//   model.layers.L.input_layernorm.weight          [dim]                 unit 1 + L
//   model.layers.L.self_attn.{q,k,v}_proj.weight   [q_dim | kv_dim, dim]
//   model.layers.L.self_attn.o_proj.weight         [dim, q_dim]
//   model.layers.L.post_attention_layernorm.weight [dim]
//   model.layers.L.mlp.{gate,up}_proj.weight       [ffn, dim]
//   model.layers.L.mlp.down_proj.weight            [dim, ffn]
//
// Offsets are in elements from the start of the flat buffer; every tensor and unit starts on a
// 64-byte boundary (16 floats).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lmcore/core/tensor.h"
#include "lmcore/model/config.h"

namespace lmcore::model {

struct ParamSpec {
  std::string name;
  Shape shape;
  std::int64_t offset = 0;  // in the flat buffer
  std::int64_t numel = 0;
  int unit = 0;
  bool weight_decay = true;  // false for norms and embeddings (AdamW's default groups)
};

struct UnitSpec {
  std::string name;  // "root" or "layers.L"
  std::int64_t offset = 0, numel = 0;  // numel includes alignment padding up to the next unit
};

// Offsets of a block's tensors relative to the start of its unit (the same in every block).
struct BlockOffsets {
  std::int64_t input_norm = 0, wqkv = 0, wo = 0, post_norm = 0, wgu = 0, wdown = 0;
};
// Offsets of the root tensors relative to the start of unit 0; head == embed when tied.
struct RootOffsets {
  std::int64_t embed = 0, norm = 0, head = 0;
};

// A piece of a local buffer that holds part of the flat parameters (one rank's shard of a unit in
// sharded training): `length` elements, of which the first `real` are the flat elements
// [global_begin, global_begin + real) and the rest padding.
struct ShardPiece {
  std::int64_t global_begin = 0, real = 0, length = 0;
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);

  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  std::int64_t size() const { return size_; }  // floats in the flat buffer
  // Throws Error naming the parameter when there is none of that name.
  const ParamSpec& at(std::string_view name) const;
  const ParamSpec* find(std::string_view name) const;
  const BlockOffsets& block() const { return block_; }
  const RootOffsets& root() const { return root_; }
  // A view of one parameter inside a flat buffer laid out by this layout (f32 or another dtype).
  Tensor view(const Tensor& flat, const ParamSpec& spec) const;

 private:
  std::vector<ParamSpec> params_;
  std::vector<UnitSpec> units_;
  BlockOffsets block_;
  RootOffsets root_;
  std::int64_t size_ = 0;
};

}  // namespace lmcore::model
