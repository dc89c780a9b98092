// lmcore/model/llama.h — a Llama-style decoder-only transformer with hand-written forward and backward.
//
//   x = embed(tokens)                                              (N, C)   N = B * T
//   for each block:
//     x = x + o_proj(attention(rope(qkv_proj(rmsnorm(x)))))          flex attention with the config's mask
//     x = x + down_proj(silu(gate_proj(h)) * up_proj(h)),  h = rmsnorm(x)
//   loss = linear_cross_entropy(rmsnorm(x), head)                   the fused head: no (N, V) logits
//
// Parameters, gradients and AdamW state are f32 flat buffers (parameters.h). With compute dtype bf16
// the matrix products take bf16 operands (bf16 weights: the root's copy refreshed by params_updated(),
// each block's converted when the block runs; and bf16 activations) and accumulate in f32; norms,
// RoPE, SwiGLU, softmax and the loss run in f32.
//
// Activations that the backward needs live in one arena planned from the config and the batch shape
// (activation_bytes()). With recompute, only each block's input is kept and the backward recomputes
// the block's activations into one block's worth of scratch.
//
//   Llama m(config, {.batch = 8, .seq_len = 256});
//   m.init_weights(seed);
//   m.zero_grad();
//   double loss = m.forward_backward(tokens, targets, /*grad_scale=*/1.0f).loss;
//   // m.grads() now holds d loss / d params; an optimizer updates m.params(), then m.params_updated().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lmcore/core/tensor.h"
#include "lmcore/model/config.h"
#include "lmcore/model/layers.h"
#include "lmcore/model/parameters.h"

namespace lmcore::model {

struct ModelOptions {
  std::int64_t batch = 1;
  std::int64_t seq_len = 0;       // T; 0 means config.max_seq_len
  DType compute = DType::f32;     // f32 or bf16
  bool recompute = false;
  // RMSNorm, the MLP (gate/up + SwiGLU, down + residual, d-input + SwiGLU backward) and every other
  // product whose B is a block weight (qkv, o_proj + residual, the d-input products) through generated,
  // tuned kernels (lmcore/codegen: compiled at construction or loaded from the kernel cache, the
  // generic kernels when no compiler; a cold cache compiles and tunes 66 kernels, ~1 minute on 2 cores).
  // f32 compute only; bf16 keeps the regular path.
  bool codegen = false;
  // Keep each block's gate|up product (N x 2 ffn_dim in the compute dtype) for the backward. false
  // recomputes it there instead (same bits): 2 (bf16) or 4 (f32) bytes x N x 2 ffn_dim less per block
  // (GPT-2-sized: 96 / 192 MiB of peak RSS) for the product again. Unset: keep_gate_up_rule(config).
  std::optional<bool> keep_gate_up = std::nullopt;
  // Bytes the fused loss head may spend on its tiles of logits (LossOptions::memory_budget). The
  // default keeps the GPT-2-sized head (N 1024 x V 32000) at a quarter of its logits, in tiles still
  // wide enough for full-speed products (bench train measures both).
  std::int64_t head_memory_budget = std::int64_t{32} << 20;
  // false: the model allocates no parameter, gradient or compute-weight buffers; a UnitAccess must be
  // installed before use (sharded training keeps only a shard of each on every rank).
  bool own_parameters = true;
};

// ModelOptions::keep_gate_up when it is unset: keep gate|up unless the model has at least
// kRecomputeGateUpParams parameters (1 GiB of f32 training state: weights, gradients, two AdamW
// moments). Measured (lmcore bench train, 2 cores, AMX): recomputing it cost the GPT-2-sized model
// (110M) ~4% of a bf16 step and saved 96 MiB (bf16) / 192 MiB (f32) of its ~2 GiB, while the default
// model (11M) lost 5-10% (bf16) and 15% (f32) of its speed for 40-80 MiB; a large model's memory is
// what limits it (its state alone is 16 bytes per parameter), a small one's is its speed.
inline constexpr std::int64_t kRecomputeGateUpParams = std::int64_t{1} << 26;  // 67.1M
bool keep_gate_up_rule(const ModelConfig& config);

// How the model reaches each sharding unit's weights and gradients. The default serves the model's own
// flat buffers; sharded training (FSDP) gathers a unit before it is used and scatters its gradients
// after. Units: 0 is the root (embedding, final norm, head), 1 + l is block l (ParameterLayout).
class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The unit's weights in the compute dtype, laid out as ParameterLayout's unit (offsets relative to
  // the unit's start). Valid until release(unit).
  virtual const void* weights(int unit) = 0;
  // The unit's f32 gradient accumulator (same relative layout); the model ADDS into it.
  virtual float* grads(int unit) = 0;
  // The model is done reading the unit's weights for now (forward or backward).
  virtual void release(int unit) { (void)unit; }
  // The unit's gradients are complete for this micro-batch.
  virtual void grads_ready(int unit) { (void)unit; }
  // Phases of a micro-batch, so that an access can prefetch in the order the units will be needed:
  // forward uses 0, 1, ..., L (and 0 stays in use through the head); backward uses L, ..., 1, then 0.
  virtual void begin_forward(bool with_backward) { (void)with_backward; }
  virtual void begin_backward() {}
  virtual void end_step() {}
};

// Llama's initialisation of the flat elements [begin, end) of a layout (out holds end - begin floats):
// normal(0, 0.02) for matrices and the embedding, o_proj and down_proj scaled by 1 / sqrt(2 n_layers),
// norms at 1, alignment padding 0. Each tensor draws from its own stream seeded by (seed, index), so
// any slice equals the same slice of the whole, on any thread count.
void init_parameters(const ParameterLayout& layout, const ModelConfig& config, std::uint64_t seed, std::int64_t begin,
                     std::int64_t end, float* out);

struct StepLoss {
  double loss = 0.0;    // mean cross-entropy plus z-loss over the micro-batch's tokens
  double z_loss = 0.0;  // the z-loss term alone
};

class Llama {
 public:
  Llama(const ModelConfig& config, const ModelOptions& options);
  ~Llama();
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const ParameterLayout& layout() const { return layout_; }
  std::int64_t batch() const { return options_.batch; }
  std::int64_t seq_len() const { return options_.seq_len; }

  // Flat f32 buffers of layout().size() elements.
  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  const Tensor& params() const { return params_; }
  const Tensor& grads() const { return grads_; }
  // A view of one parameter (or its gradient) by its Hugging Face name.
  Tensor param(std::string_view name) const;
  Tensor grad(std::string_view name) const;

  // init_parameters over the whole buffer.
  void init_weights(std::uint64_t seed);
  void zero_grad();
  // Must be called after params() changed (optimizer step, load) when the compute dtype is not f32.
  void params_updated();
  // Sharded training installs its own access; nullptr restores the model's own buffers.
  void set_unit_access(UnitAccess* access);
  UnitAccess& access();

  // tokens, targets: (B, T) row-major in [0, vocab). Forward and backward of one micro-batch: ADDS
  // grad_scale * d loss / d params into the gradients.
  StepLoss forward_backward(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale);
  // Forward only (evaluation).
  StepLoss forward_loss(const std::int32_t* tokens, const std::int32_t* targets);
  // Logits (B * T, vocab) f32 after the softcap, for tests and sampling (materialises them).
  Tensor logits(const std::int32_t* tokens);

  // Whether each block's gate|up product is kept for the backward (ModelOptions::keep_gate_up, or the
  // rule when unset; always with codegen, whose fused SwiGLU keeps it).
  bool keeps_gate_up() const;
  // Bytes of the activation arena.
  std::size_t activation_bytes() const;
  // Forward + backward multiply-add flops of one micro-batch, x2 (6 N params + attention).
  double flops_per_step() const;

 private:
  struct Impl;
  void prepare_batch(const std::int32_t* tokens, const std::int32_t* targets);
  const std::byte* forward_trunk(const std::int32_t* tokens);
  ModelConfig config_;
  ModelOptions options_;
  ParameterLayout layout_;
  Tensor params_, grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmcore::model
