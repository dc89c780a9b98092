// The Llama model's forward and backward: the order of the layers, the activation arena and the
// buffers each matrix product reads and writes. The layers themselves are in layers.cpp, the matrix
// products in gemm.cpp, attention in the flex attention part and the head in the loss part.
#include "lmcore/model/llama.h"

#include <cmath>
#include <cstring>
#include <random>

#include "lmcore/attention/block_mask.h"
#include "lmcore/attention/flex_attention.h"
#include "lmcore/codegen/model_kernels.h"
#include "lmcore/core/allocator.h"
#include "lmcore/core/error.h"
#include "lmcore/core/runtime_info.h"
#include "lmcore/loss/cross_entropy.h"
#include "lmcore/loss/linear_cross_entropy.h"
#include "src/model/gemm.h"
#include "src/model/llama_impl.h"

namespace lmcore::model {

using attention::BlockMask;
using attention::FlexOptions;
using attention::MaskMod;

namespace {
LossOptions head_loss_options(const ModelConfig& c, const ModelOptions& mo) {
  LossOptions o;
  o.memory_budget = mo.head_memory_budget;
  o.z_loss = c.z_loss;
  o.softcap = c.logit_softcap;
  o.label_smoothing = c.label_smoothing;
  return o;
}

}  // namespace

// The head's loss options, its tiles in the arena's head region after the rounded head (when there is
// one); allocated per call instead when the region is short for this call's tiling (the matrix-unit
// path switched off after construction: set_lowp_gemm_onednn).
LossOptions Llama::Impl::head_options(const ModelConfig& c, const ModelOptions& mo, bool backward) const {
  const Impl& m = *this;
  LossOptions o = head_loss_options(c, mo);
  const std::size_t at = m.root_f32 ? (static_cast<std::size_t>(m.V * m.C) * m.cs + 63) / 64 * 64 : 0;
  const std::size_t room = m.head_region_bytes - std::min(at, m.head_region_bytes);
  if (linear_cross_entropy_workspace_bytes(m.N, m.C, m.V, m.ct, o, backward) <= room) {
    o.workspace = reinterpret_cast<std::byte*>(m.sA) + at;
    o.workspace_bytes = room;
  }
  return o;
}

Llama::Llama(const ModelConfig& config, const ModelOptions& options)
    : config_(config), options_(options), layout_(config), impl_(std::make_unique<Impl>()) {
  config_.validate();
  if (options_.seq_len == 0) options_.seq_len = config_.max_seq_len;
  LMCORE_CHECK(options_.batch >= 1, "Llama: batch must be >= 1, found {}", options_.batch);
  LMCORE_CHECK(options_.seq_len >= 1 && options_.seq_len <= config_.max_seq_len,
               "Llama: seq_len must be in [1, max_position_embeddings = {}], found {}", config_.max_seq_len,
               options_.seq_len);
  LMCORE_CHECK(options_.head_memory_budget > 0, "Llama: head_memory_budget must be > 0 bytes, found {}",
               options_.head_memory_budget);
  LMCORE_CHECK(options_.compute == DType::f32 || options_.compute == DType::bf16,
               "Llama: compute dtype must be f32 or bf16, found {}", options_.compute);
  Impl& m = *impl_;
  m.B = options_.batch;
  m.T = options_.seq_len;
  LMCORE_CHECK(!__builtin_mul_overflow(m.B, m.T, &m.N), "Llama: batch {} x seq_len {} tokens overflows 64 bits", m.B,
               m.T);
  m.C = config_.dim;
  m.Hq = config_.n_heads;
  m.Hkv = config_.n_kv_heads;
  m.hd = config_.head_dim();
  m.Q = config_.q_dim();
  m.QKV = m.Q + 2 * config_.kv_dim();
  m.F = config_.ffn_dim;
  m.V = config_.vocab_size;
  m.L = config_.n_layers;
  m.ct = options_.compute;
  m.cs = dtype_size(m.ct);
  // Fail with the sizes, before anything is allocated, when the activations cannot fit (a careless
  // --seq-len would otherwise fill the RoPE table and the arena until the kernel kills the process).
  // The block inputs alone take N x C f32 per layer; the full plan is checked below.
  const std::uint64_t memory = physical_memory_bytes();
  auto check_memory = [&](double activations) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const double rope = 2.0 * static_cast<double>(m.T) * static_cast<double>(m.hd / 2) * 4.0;
    const double own = options_.own_parameters ? 2.0 * static_cast<double>(layout_.size()) * 4.0 : 0.0;
    const double need = activations + rope + own;
    LMCORE_CHECK(memory == 0 || need <= static_cast<double>(memory),
                 "Llama: batch {} x seq_len {} ({} tokens) needs {:.1f} GiB (activations {:.1f}, RoPE table {:.1f}, "
                 "parameters and gradients {:.1f}), more than this machine's {:.1f} GiB of memory; lower the batch size "
                 "or the sequence length{}",
                 m.B, m.T, static_cast<double>(m.B) * static_cast<double>(m.T), need / gib, activations / gib,
                 rope / gib, own / gib, static_cast<double>(memory) / gib,
                 options_.recompute ? "" : ", or recompute the activations in the backward (--recompute)");
  };
  check_memory(static_cast<double>(m.B) * static_cast<double>(m.T) * static_cast<double>(m.C) * 4.0 *
               static_cast<double>(m.L));

  // ---- plan the arena: every buffer 64-byte aligned ----
  const std::int64_t N = m.N, C = m.C;
  // Scratch widths (columns of N rows), from the uses in block.cpp and the head:
  //   sA: h1, h2 (C), qkv and dqkv (QKV), gu widened (2F);  sB: da (F), dh2 (C), dy (Q);
  //   sC: a (F), dgu (2F), dh1 (C);  cA: dgu, dy, embedding rows (C);  cB: dx, dqkv  (cA, cB: compute
  //   dtype, bf16 only).
  const std::int64_t wA = std::max({C, m.QKV, 2 * m.F}), wB = std::max({m.F, C, m.Q}), wC = std::max(2 * m.F, C);
  const std::int64_t wcA = std::max({2 * m.F, m.Q, C}), wcB = std::max(C, m.QKV);
  std::vector<std::pair<void**, std::size_t>> plan;
  auto f32buf = [&](float** p, std::int64_t n) { plan.push_back({reinterpret_cast<void**>(p), static_cast<std::size_t>(n) * 4}); };
  auto ctbuf = [&](void** p, std::int64_t n) { plan.push_back({p, static_cast<std::size_t>(n) * m.cs}); };
  m.blocks.resize(static_cast<std::size_t>(m.L));
  m.keep_a = options_.codegen && m.f32();  // m.cg below is made exactly then
  m.keep_gu = m.keep_a || options_.keep_gate_up.value_or(keep_gate_up_rule(config_));
  m.recompute = options_.recompute;
  BlockActs shared;  // x_mid, h1 = h2, gu, a (recomputed in the backward); with recompute, all but x_in
  auto plan_block = [&](BlockActs& b) {
    f32buf(&b.rstd1, N);
    ctbuf(&b.qkv, N * m.QKV);
    ctbuf(&b.y, N * m.Q);
    f32buf(&b.lse, m.B * m.Hq * m.T);
    f32buf(&b.rstd2, N);
    if (m.keep_gu) ctbuf(&b.gu, N * 2 * m.F);
    if (m.keep_a) ctbuf(&b.a, N * m.F);
  };
  for (BlockActs& b : m.blocks) {
    f32buf(&b.x_in, N * C);
    if (!options_.recompute) plan_block(b);
  }
  if (options_.recompute) plan_block(shared);
  f32buf(&m.x_final, N * C);
  f32buf(&m.rstd_f, N);
  ctbuf(&m.hf, N * C);
  f32buf(&m.sA, N * wA);
  f32buf(&m.sB, N * wB);
  f32buf(&m.sC, N * wC);
  if (!m.f32()) {
    ctbuf(&m.cA, N * wcA);
    ctbuf(&m.cB, N * wcB);
  }
  // Dead while the head runs, and planned back to back from sA on: the scratch, the shared
  // activations and dx. The head uses them (Impl::head_region): with the local bf16 access the [V, C]
  // head is rounded into them, and the loss's tiles live after it (LossOptions::workspace). The
  // region gets a pad when they need more. (GPT-2-sized bf16: 47 MiB of head and 32 MiB of tiles in
  // 72 MiB; f32: 16 MiB of tiles in 57 MiB.)
  const std::size_t region_first = plan.size() - (m.f32() ? 3 : 5);
  f32buf(&shared.x_mid, N * C);
  ctbuf(&shared.h1, N * C);
  if (!m.keep_gu) ctbuf(&shared.gu, N * 2 * m.F);
  if (!m.keep_a) ctbuf(&shared.a, N * m.F);
  f32buf(&m.dx, N * C);
  auto r64 = [](std::size_t bytes) { return (bytes + 63) / 64 * 64; };
  std::size_t dead = 0;
  for (std::size_t i = region_first; i < plan.size(); ++i) dead += r64(plan[i].second);
  const std::size_t head_copy = options_.own_parameters && !m.f32() ? r64(static_cast<std::size_t>(m.V * C) * m.cs) : 0;
  const std::size_t need =
      head_copy + linear_cross_entropy_workspace_bytes(N, C, m.V, m.ct, head_loss_options(config_, options_));
  void* pad = nullptr;
  if (need > dead) plan.push_back({&pad, need - dead});
  m.head_region_bytes = std::max(need, dead);
  std::size_t total = 0;
  for (auto& [p, bytes] : plan) total += (bytes + 63) / 64 * 64;
  m.arena_bytes = total;
  check_memory(static_cast<double>(total));

  m.rope = RopeTable::make(m.T, m.hd, config_.rope_theta);
  if (options_.codegen && m.f32()) {
    const auto o = codegen::Options::from_env();
    const float eps = static_cast<float>(config_.norm_eps);
    codegen::ModelShapes shapes;
    shapes.dim = m.C;
    shapes.ffn_dim = m.F;
    shapes.q_dim = m.Q;
    shapes.qkv_dim = m.QKV;
    shapes.tokens = m.N;
    shapes.eps = eps;
    const codegen::ModelGemms g = codegen::model_gemms(shapes);
    auto gemm = [&](const codegen::GemmSpec& spec) { return codegen::GemmKernel::get(spec, m.N, o); };
    m.cg = std::make_unique<Impl::Codegen>(Impl::Codegen{
        codegen::RmsNormKernel::get({m.C, eps}, o), gemm(g.gate_up), gemm(g.down), gemm(g.down_dinput_dswiglu),
        gemm(g.qkv), gemm(g.o_proj), gemm(g.gate_up_dinput), gemm(g.o_dinput), gemm(g.qkv_dinput)});
  }
  if (config_.mask == AttentionMask::causal)
    m.mask = attention::create_block_mask(MaskMod::causal(), 1, 1, m.T, m.T);
  else if (config_.mask == AttentionMask::sliding_window)
    m.mask = attention::create_block_mask(MaskMod::sliding_window(config_.sliding_window), 1, 1, m.T, m.T);

  if (options_.own_parameters) {
    params_ = Tensor::zeros({layout_.size()}, DType::f32);
    grads_ = Tensor::zeros({layout_.size()}, DType::f32);
    m.local = std::make_unique<LocalAccess>(layout_, params_, grads_, m.ct);
  }
  m.access = m.local.get();
  m.root_f32 = m.local != nullptr && !m.f32();
  m.arena = Storage::allocate(std::max<std::size_t>(total, 64));
  std::size_t off = 0;
  for (auto& [p, bytes] : plan) {
    *p = m.arena->data() + off;
    off += (bytes + 63) / 64 * 64;
  }
  if (m.f32()) {
    m.cA = m.sA;
    m.cB = m.sB;
  }
  shared.h2 = shared.h1;
  for (BlockActs& b : m.blocks) {
    if (options_.recompute) {
      float* x_in = b.x_in;
      b = shared;
      b.x_in = x_in;
    }
    b.x_mid = shared.x_mid;
    b.h1 = shared.h1;
    b.h2 = shared.h2;
    if (!m.keep_gu) b.gu = shared.gu;
    if (!m.keep_a) b.a = shared.a;
  }
  m.targets64 = Tensor::empty({N}, DType::i64);
}

bool keep_gate_up_rule(const ModelConfig& config) { return config.num_parameters() < kRecomputeGateUpParams; }

LocalAccess::LocalAccess(const ParameterLayout& layout, const Tensor& params, const Tensor& grads, DType compute)
    : layout_(layout), params_(params), grads_(grads), compute_(compute) {
  if (compute_ == DType::f32) return;
  std::int64_t block_numel = 0;
  for (std::size_t u = 1; u < layout_.units().size(); ++u) block_numel = std::max(block_numel, layout_.units()[u].numel);
  block_ = Tensor::empty({std::max<std::int64_t>(block_numel, 1)}, compute_);
}

const void* LocalAccess::weights(int unit) {
  const UnitSpec& u = layout_.units()[static_cast<std::size_t>(unit)];
  if (compute_ == DType::f32 || unit == 0) return params_.data<float>() + u.offset;  // the root in f32: Impl::root_f32
  if (block_unit_ != unit) {
    block_.narrow(0, 0, u.numel).copy_(params_.narrow(0, u.offset, u.numel));
    block_unit_ = unit;
  }
  return block_.data_ptr();
}

void Llama::Impl::embed_rows(float* x0, const std::byte* root, std::int64_t off, const std::int32_t* tokens) {
  if (f32()) {
    embedding_forward(x0, tokens, reinterpret_cast<const float*>(root) + off, N, C, V);
    return;
  }
  // Rows in the compute dtype, gathered into cA (rounded from f32 with root_f32), then widened.
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t row = off + static_cast<std::int64_t>(tokens[n]) * C;
    Tensor dst = ct_tensor(at(cA, n * C), {C});
    if (root_f32) dst.copy_(Tensor::from_blob(const_cast<float*>(reinterpret_cast<const float*>(root)) + row, {C}, DType::f32, nullptr));
    else dst.copy_(ct_tensor(const_cast<std::byte*>(root) + row * static_cast<std::int64_t>(cs), {C}));
  }
  Tensor::from_blob(x0, {N * C}, DType::f32, nullptr).copy_(ct_tensor(cA, {N * C}));
}

const float* Llama::Impl::root_norm_weight(const std::byte* root, std::int64_t off) {
  if (!root_f32) return norm_weight(root + off * static_cast<std::int64_t>(cs));
  const Tensor w32 = Tensor::from_blob(const_cast<float*>(reinterpret_cast<const float*>(root)) + off, {C}, DType::f32, nullptr);
  norm_w.resize(static_cast<std::size_t>(C));
  Tensor::from_blob(norm_w.data(), {C}, DType::f32, nullptr).copy_(w32.to(ct));
  return norm_w.data();
}

const void* Llama::Impl::head_weight(const std::byte* root, std::int64_t off) {
  if (!root_f32) return root + off * static_cast<std::int64_t>(cs);
  ct_tensor(sA, {V * C}).copy_(
      Tensor::from_blob(const_cast<float*>(reinterpret_cast<const float*>(root)) + off, {V * C}, DType::f32, nullptr));
  return sA;
}

Llama::~Llama() = default;

Tensor Llama::param(std::string_view name) const { return layout_.view(params_, layout_.at(name)); }
Tensor Llama::grad(std::string_view name) const { return layout_.view(grads_, layout_.at(name)); }

void init_parameters(const ParameterLayout& layout, const ModelConfig& config, std::uint64_t seed, std::int64_t begin,
                     std::int64_t end, float* out) {
  LMCORE_CHECK(0 <= begin && begin <= end && end <= layout.size(), "init_parameters: [{}, {}) is outside the {} parameters",
               begin, end, layout.size());
  std::fill(out, out + (end - begin), 0.0f);
  const double std_dev = 0.02;
  const double out_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config.n_layers));
  for (std::size_t i = 0; i < layout.params().size(); ++i) {
    const ParamSpec& s = layout.params()[i];
    const std::int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    float* w = out + (lo - begin);
    if (s.shape.size() == 1) {  // norms
      std::fill(w, w + (hi - lo), 1.0f);
      continue;
    }
    const bool out_proj = s.name.ends_with("o_proj.weight") || s.name.ends_with("down_proj.weight");
    const double sd = std_dev * (out_proj ? out_scale : 1.0);
    std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1);
    std::normal_distribution<double> normal(0.0, sd);
    for (std::int64_t j = s.offset; j < lo; ++j) (void)normal(gen);  // the part of the stream before the slice
    for (std::int64_t j = lo; j < hi; ++j) *w++ = static_cast<float>(normal(gen));
  }
}

void Llama::init_weights(std::uint64_t seed) {
  LMCORE_CHECK(options_.own_parameters, "Llama::init_weights: the model does not own its parameters (sharded)");
  init_parameters(layout_, config_, seed, 0, layout_.size(), params_.data<float>());
  params_updated();
}

void Llama::zero_grad() {
  if (options_.own_parameters) grads_.zero_();
}

void Llama::params_updated() {
  if (options_.own_parameters) impl_->local->refresh();
}

void Llama::set_unit_access(UnitAccess* access) {
  Impl& m = *impl_;
  m.access = access ? access : m.local.get();
  m.root_f32 = m.access != nullptr && m.access == m.local.get() && !m.f32();
}

UnitAccess& Llama::access() {
  LMCORE_CHECK(impl_->access != nullptr,
               "Llama: the model does not own its parameters and no UnitAccess is installed (set_unit_access)");
  return *impl_->access;
}

bool Llama::keeps_gate_up() const { return impl_->keep_gu; }

std::size_t Llama::activation_bytes() const { return impl_->arena_bytes; }

double Llama::flops_per_step() const {
  const Impl& m = *impl_;
  // Multiply-adds per token of every matrix product in the forward, head included.
  const double per_token = static_cast<double>(m.L) * static_cast<double>(m.C * m.QKV + m.Q * m.C + m.C * 2 * m.F + m.F * m.C) +
                           static_cast<double>(m.V * m.C);
  double flops = 6.0 * per_token * static_cast<double>(m.N);  // forward 2, backward 4 per multiply-add
  // Attention: QK^T and PV forward, five products backward, over the mask's computed blocks.
  // (Document masks change per batch: counted as causal, their upper bound.)
  const BlockMask bm = config_.mask == AttentionMask::document
                           ? attention::create_block_mask(MaskMod::causal(), 1, 1, m.T, m.T)
                           : m.mask;
  const attention::FlexFlops ff = attention::flex_flops(bm, m.B, m.Hq, m.hd, m.hd);
  flops += static_cast<double>(m.L) * (ff.forward + ff.backward);
  return flops;
}


void Llama::prepare_batch(const std::int32_t* tokens, const std::int32_t* targets) {
  Impl& m = *impl_;
  for (std::int64_t n = 0; n < m.N; ++n) {
    LMCORE_CHECK(tokens[n] >= 0 && tokens[n] < m.V, "Llama: input token {} at position {} is outside [0, vocab_size = {})",
                 tokens[n], n, m.V);
    if (targets)
      LMCORE_CHECK(targets[n] >= 0 && targets[n] < m.V,
                   "Llama: target token {} at position {} is outside [0, vocab_size = {})", targets[n], n, m.V);
  }
  if (targets) {
    std::int64_t* t64 = m.targets64.data<std::int64_t>();
    for (std::int64_t n = 0; n < m.N; ++n) t64[n] = targets[n];
  }
  if (config_.mask == AttentionMask::document) m.build_document_masks(tokens, config_.eos_token_id);
}

// Embedding, every block, final norm: leaves the head's input in hf. The root unit stays acquired.
const std::byte* Llama::forward_trunk(const std::int32_t* tokens) {
  Impl& m = *impl_;
  const std::byte* root = static_cast<const std::byte*>(access().weights(0));
  float* x0 = m.blocks.empty() ? m.x_final : m.blocks[0].x_in;
  m.embed_rows(x0, root, layout_.root().embed, tokens);
  for (std::int64_t l = 0; l < m.L; ++l) {
    const int unit = static_cast<int>(l) + 1;
    const std::byte* w = static_cast<const std::byte*>(access().weights(unit));
    float* x_out = l + 1 < m.L ? m.blocks[l + 1].x_in : m.x_final;
    m.block_forward(m.blocks[l], w, x_out, config_, layout_.block());
    access().release(unit);
  }
  float* hf32 = m.f32() ? static_cast<float*>(m.hf) : m.sA;
  rmsnorm_forward(hf32, m.rstd_f, m.x_final, m.root_norm_weight(root, layout_.root().norm), m.N, m.C,
                  static_cast<float>(config_.norm_eps));
  m.store(m.hf, hf32, m.N * m.C);
  return root;
}

StepLoss Llama::forward_backward(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) {
  Impl& m = *impl_;
  prepare_batch(tokens, targets);
  access().begin_forward(/*with_backward=*/true);
  const std::byte* root = forward_trunk(tokens);
  float* groot = access().grads(0);
  // ---- head: fused linear cross-entropy, forward and backward in one pass ----
  const Tensor hidden = m.ct_tensor(m.hf, {m.N, m.C});
  const Tensor head = m.ct_tensor(const_cast<void*>(m.head_weight(root, layout_.root().head)), {m.V, m.C});
  const Tensor d_head = Tensor::from_blob(groot + layout_.root().head, {m.V, m.C}, DType::f32, nullptr);
  const LinearCrossEntropyOutput out =
      linear_cross_entropy_with_grad(hidden, head, m.targets64, m.head_options(config_, options_, true),
                                     Tensor::full({}, grad_scale, DType::f32), d_head, Tensor());
  StepLoss loss{out.loss.item_as_double(), out.z_loss.item_as_double()};
  // ---- final norm ----
  std::memset(m.dx, 0, static_cast<std::size_t>(m.N * m.C) * 4);
  const float* dhf = m.as_f32(out.d_hidden.data_ptr(), m.sA, m.N * m.C);
  rmsnorm_backward(m.dx, groot + layout_.root().norm, dhf, m.x_final, m.root_norm_weight(root, layout_.root().norm),
                   m.rstd_f, m.N, m.C);
  // ---- blocks, last to first ----
  access().begin_backward();
  for (std::int64_t l = m.L - 1; l >= 0; --l) {
    const int unit = static_cast<int>(l) + 1;
    const std::byte* w = static_cast<const std::byte*>(access().weights(unit));
    if (options_.recompute) m.block_forward(m.blocks[l], w, nullptr, config_, layout_.block());
    m.block_backward(m.blocks[l], w, access().grads(unit), layout_.block(), static_cast<float>(config_.norm_eps));
    access().release(unit);
    access().grads_ready(unit);
  }
  // ---- embedding ----
  embedding_backward(groot + layout_.root().embed, m.dx, tokens, m.N, m.C, m.V);
  access().release(0);
  access().grads_ready(0);
  access().end_step();
  return loss;
}

StepLoss Llama::forward_loss(const std::int32_t* tokens, const std::int32_t* targets) {
  Impl& m = *impl_;
  prepare_batch(tokens, targets);
  access().begin_forward(/*with_backward=*/false);
  const std::byte* root = forward_trunk(tokens);
  const Tensor hidden = m.ct_tensor(m.hf, {m.N, m.C});
  const Tensor head = m.ct_tensor(const_cast<void*>(m.head_weight(root, layout_.root().head)), {m.V, m.C});
  const LossResult r = linear_cross_entropy(hidden, head, m.targets64, m.head_options(config_, options_, false));
  access().release(0);
  access().end_step();
  return {r.loss.item_as_double(), r.z_loss.item_as_double()};
}

Tensor Llama::logits(const std::int32_t* tokens) {
  Impl& m = *impl_;
  prepare_batch(tokens, nullptr);
  access().begin_forward(/*with_backward=*/false);
  const std::byte* root = forward_trunk(tokens);
  Tensor out = Tensor::empty({m.N, m.V}, DType::f32);
  detail::gemm(m.ct, false, true, m.N, m.V, m.C, 1.0f, m.hf, m.C, m.head_weight(root, layout_.root().head), m.C, 0.0f,
               out.data<float>(), m.V);
  access().release(0);
  access().end_step();
  if (config_.logit_softcap > 0) {
    const float c = static_cast<float>(config_.logit_softcap);
    float* p = out.data<float>();
    for (std::int64_t i = 0; i < out.numel(); ++i) p[i] = c * std::tanh(p[i] / c);
  }
  return out;
}

}  // namespace lmcore::model
