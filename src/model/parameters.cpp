#include "lmcore/model/parameters.h"

#include <fmt/format.h>

#include "lmcore/core/error.h"

namespace lmcore::model {

namespace {
constexpr std::int64_t kAlign = 16;  // floats: 64 bytes
std::int64_t align_up(std::int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

ParameterLayout::ParameterLayout(const ModelConfig& c) {
  c.validate();
  std::int64_t cursor = 0;
  // `packed`: the next tensor follows without alignment padding (q/k/v and gate/up are read as one matrix).
  auto add = [&](std::string name, Shape shape, int unit, bool decay, std::int64_t unit_start, bool packed = false) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = checked_numel(p.shape, "ParameterLayout");
    p.offset = cursor;
    p.unit = unit;
    p.weight_decay = decay;
    cursor = packed ? cursor + p.numel : align_up(cursor + p.numel);
    params_.push_back(std::move(p));
    return params_.back().offset - unit_start;
  };
  const std::int64_t D = c.dim, V = c.vocab_size, F = c.ffn_dim;
  // Unit 0: the root.
  units_.push_back({"root", 0, 0});
  root_.embed = add("model.embed_tokens.weight", {V, D}, 0, false, 0);
  root_.norm = add("model.norm.weight", {D}, 0, false, 0);
  root_.head = c.tie_embeddings ? root_.embed : add("lm_head.weight", {V, D}, 0, true, 0);
  units_[0].numel = cursor;
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const std::int64_t start = cursor;
    const int u = static_cast<int>(l) + 1;
    const std::string pre = fmt::format("model.layers.{}.", l);
    BlockOffsets b;
    b.input_norm = add(pre + "input_layernorm.weight", {D}, u, false, start);
    b.wqkv = add(pre + "self_attn.q_proj.weight", {c.q_dim(), D}, u, true, start, /*packed=*/true);
    add(pre + "self_attn.k_proj.weight", {c.kv_dim(), D}, u, true, start, /*packed=*/true);
    add(pre + "self_attn.v_proj.weight", {c.kv_dim(), D}, u, true, start);
    b.wo = add(pre + "self_attn.o_proj.weight", {D, c.q_dim()}, u, true, start);
    b.post_norm = add(pre + "post_attention_layernorm.weight", {D}, u, false, start);
    b.wgu = add(pre + "mlp.gate_proj.weight", {F, D}, u, true, start, /*packed=*/true);
    add(pre + "mlp.up_proj.weight", {F, D}, u, true, start);
    b.wdown = add(pre + "mlp.down_proj.weight", {D, F}, u, true, start);
    if (l == 0) block_ = b;
    units_.push_back({pre.substr(6, pre.size() - 7), start, cursor - start});
  }
  size_ = cursor;
}

const ParamSpec* ParameterLayout::find(std::string_view name) const {
  for (const ParamSpec& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamSpec& ParameterLayout::at(std::string_view name) const {
  const ParamSpec* p = find(name);
  LMCORE_CHECK(p != nullptr, "model: no parameter named '{}'", name);
  return *p;
}

Tensor ParameterLayout::view(const Tensor& flat, const ParamSpec& spec) const {
  LMCORE_CHECK(flat.dim() == 1 && flat.numel() == size_ && flat.is_contiguous(),
               "ParameterLayout::view: expected a contiguous flat buffer of {} elements, found {}", size_,
               flat.describe());
  return flat.narrow(0, spec.offset, spec.numel).view(spec.shape);
}

}  // namespace lmcore::model
