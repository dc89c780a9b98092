// Private: the state behind lmcore::model::Llama, shared by llama.cpp (construction, arena) and
// block.cpp (forward and backward).
#pragma once

#include <memory>
#include <vector>

#include "lmcore/attention/block_mask.h"
#include "lmcore/codegen/gemm.h"
#include "lmcore/codegen/rmsnorm.h"
#include "lmcore/loss/cross_entropy.h"
#include "lmcore/model/llama.h"

namespace lmcore::model {

// The model's own flat buffers. In f32 the weights are the f32 parameters themselves. In bf16:
//  - a block's weights are converted when the block asks for them, into one block's worth of storage
//    (a forward and a backward convert each block once; the copy of all L blocks is never held);
//  - the root (embedding, final norm, head) is served in f32, and the model rounds what it reads of
//    it (Impl::root_f32): embedding rows, the final norm's weight, and the [V, C] head, rounded into
//    the scratch buffers, which are dead while the head runs.
// Either way the products see the bits that a bf16 copy of the whole buffer would hold.
class LocalAccess final : public UnitAccess {
 public:
  LocalAccess(const ParameterLayout& layout, const Tensor& params, const Tensor& grads, DType compute);
  const void* weights(int unit) override;
  float* grads(int unit) override { return grads_.data<float>() + layout_.units()[unit].offset; }
  // The f32 parameters changed: the block copy is stale.
  void refresh() { block_unit_ = -1; }

 private:
  const ParameterLayout& layout_;
  Tensor params_, grads_;
  DType compute_;
  Tensor block_;         // one block unit in the compute dtype (bf16 only)
  int block_unit_ = -1;  // the unit whose weights block_ holds, -1 for none
};

// Activations of one block. Kept per block (unless recompute): x_in, rstd1, qkv, y, lse, rstd2.
// x_mid, h1, h2, gu and a are recomputed in the backward and point at one shared buffer each, so they
// cost one block's worth instead of L: x_mid = x_in + y @ Wo^T (the o_proj product again: ~8% of a
// block's forward products), the norms from x_in / x_mid and the saved rstd, gu = h2 @ Wgu^T (the
// gate|up product again, ~45%: only without ModelOptions::keep_gate_up, see keep_gate_up_rule), a = SwiGLU of
// gu as stored. With codegen, gu and a stay per block (its fused SwiGLU is not the plain one).
// The recomputed values are the forward's bits: the same kernels on the same inputs. With recompute
// every block but x_in points at the shared scratch.
//
// The arena for GPT-2-sized shapes (N 1024, C 768, QKV 2304, F 2048; MiB, f32 | bf16):
//   per block  x_in 3 | 3, qkv 9 | 4.5, y 3 | 1.5, gu 16 | 8, lse + rstd 0.06     x 12 = 373 | 205
//   shared     x_mid 3, h 3 | 1.5, a 8 | 4, x_final 3, hf 3 | 1.5, dx 3
//   (without keep_gate_up: gu 16 | 8 shared instead of per block)
//   scratch    sA 16, sB 8, sC 16 (f32);  cA 8, cB 4.5 (bf16 only)
//   head region: the scratch, the shared buffers and dx, back to back (dead while the head runs) and a
//   pad when short: the rounded head (bf16, local access: 47) and the loss's tiles (bf16 32, f32 16)
struct BlockActs {
  float* x_in = nullptr;   // (N, C) the block's input (residual stream)
  float* rstd1 = nullptr;  // (N)
  void* h1 = nullptr;      // (N, C) compute dtype: rmsnorm(x_in) * input_norm (shared)
  void* qkv = nullptr;     // (N, QKV) compute dtype: q and k after RoPE, v
  void* y = nullptr;       // (N, Q) compute dtype: attention output as (B, T, Hq, hd)
  float* lse = nullptr;    // (B, Hq, T)
  float* x_mid = nullptr;  // (N, C) x_in + o_proj(y) (shared)
  float* rstd2 = nullptr;  // (N)
  void* h2 = nullptr;      // (N, C) compute dtype (shared with h1)
  void* gu = nullptr;      // (N, 2F) compute dtype: gate | up (shared unless kept)
  void* a = nullptr;       // (N, F) compute dtype: silu(gate) * up, from gu as stored (shared)
};

struct Llama::Impl {
  // Shapes.
  std::int64_t B = 0, T = 0, N = 0, C = 0, Hq = 0, Hkv = 0, hd = 0, Q = 0, QKV = 0, F = 0, V = 0, L = 0;
  DType ct = DType::f32;
  std::size_t cs = 4;  // bytes per compute-dtype element
  RopeTable rope;
  attention::BlockMask mask;                     // causal / sliding window: one for every step
  std::vector<attention::BlockMask> doc_masks;   // document: one per batch row, rebuilt per micro-batch
  // Arena.
  std::shared_ptr<Storage> arena;
  std::size_t arena_bytes = 0;
  std::vector<BlockActs> blocks;
  float* x_final = nullptr;  // (N, C) input of the final norm
  float* rstd_f = nullptr;
  void* hf = nullptr;        // (N, C) compute dtype: the head's input
  float *sA = nullptr, *sB = nullptr, *sC = nullptr;  // f32 scratch, (N, Wmax) each
  void *cA = nullptr, *cB = nullptr;                  // compute-dtype scratch (alias sA / sB in f32)
  float* dx = nullptr;       // (N, C) gradient of the residual stream
  // sA ... dx (and a pad): dead while the head runs; it holds the rounded head (root_f32) and the
  // loss's tiles (llama.cpp, head_options).
  std::size_t head_region_bytes = 0;
  Tensor targets64;          // (N) i64 for the loss
  std::unique_ptr<LocalAccess> local;
  UnitAccess* access = nullptr;
  std::vector<float> norm_w;  // one norm weight in f32 (bf16 compute)
  // The access serves the root in f32 (LocalAccess in bf16): root reads round to the compute dtype.
  bool root_f32 = false;
  // ModelOptions::codegen: the blocks' RMSNorm, gate/up with SwiGLU (gu kept), down with the residual,
  // in the backward the down projection's d-input product with the SwiGLU backward as its epilogue, and
  // every other product whose B is a block weight (qkv, o_proj with the residual, the d-input products).
  struct Codegen {
    codegen::RmsNormKernel norm;
    codegen::GemmKernel gate_up, down, down_dinput_dswiglu;
    // The other products with a weight as B (see codegen::ModelGemms).
    codegen::GemmKernel qkv, o_proj, gate_up_dinput, o_dinput, qkv_dinput;
  };
  std::unique_ptr<Codegen> cg;
  bool keep_a = false;   // gu and a kept per block (codegen's fused SwiGLU) instead of recomputed
  bool keep_gu = false;  // gu kept per block (ModelOptions::keep_gate_up, or keep_a)
  bool recompute = false;  // ModelOptions::recompute: the backward follows a fresh block_forward

  bool f32() const { return ct == DType::f32; }
  std::byte* at(void* p, std::int64_t elems) const { return static_cast<std::byte*>(p) + elems * static_cast<std::int64_t>(cs); }

  // A compute-dtype copy of an f32 buffer: the buffer itself in f32, else cast into `dst`.
  const void* as_compute(const float* src, void* dst, std::int64_t n) const {
    if (f32()) return src;
    Tensor::from_blob(dst, {n}, ct, nullptr).copy_(Tensor::from_blob(const_cast<float*>(src), {n}, DType::f32, nullptr));
    return dst;
  }
  // f32 values of a compute-dtype buffer: the buffer itself in f32, else widened into `dst`.
  const float* as_f32(const void* src, float* dst, std::int64_t n) const {
    if (f32()) return static_cast<const float*>(src);
    Tensor::from_blob(dst, {n}, DType::f32, nullptr).copy_(Tensor::from_blob(const_cast<void*>(src), {n}, ct, nullptr));
    return dst;
  }
  // Stores f32 values into a compute-dtype buffer (no-op when it is the same f32 buffer).
  void store(void* dst, const float* src, std::int64_t n) const {
    if (dst == src) return;
    Tensor::from_blob(dst, {n}, ct, nullptr).copy_(Tensor::from_blob(const_cast<float*>(src), {n}, DType::f32, nullptr));
  }
  const float* norm_weight(const void* w) {
    if (f32()) return static_cast<const float*>(w);
    norm_w.resize(static_cast<std::size_t>(C));
    return as_f32(w, norm_w.data(), C);
  }
  Tensor ct_tensor(void* p, const Shape& shape) const { return Tensor::from_blob(p, shape, ct, nullptr); }

  // ---- root reads (llama.cpp); `root` is access->weights(0), `off` an element offset in the root ----
  // x0 (N, C) f32 = rows tokens[n] of the embedding at `off`, as the compute dtype holds them.
  void embed_rows(float* x0, const std::byte* root, std::int64_t off, const std::int32_t* tokens);
  // The final norm's weight in f32, as the compute dtype holds it.
  const float* root_norm_weight(const std::byte* root, std::int64_t off);
  // The head [V, C] in the compute dtype (with root_f32, rounded into the scratch from sA on: valid
  // until the scratch is next written).
  const void* head_weight(const std::byte* root, std::int64_t off);

  // The head's loss options (llama.cpp): its tiles in the head region when they fit.
  LossOptions head_options(const ModelConfig& c, const ModelOptions& mo, bool backward) const;

  // ---- block.cpp ----
  // x_mid (N, C) = x_in + y @ Wo^T: the same kernel in the forward and in the backward's recompute.
  void o_proj_forward(const BlockActs& b, const std::byte* wo);
  // out32 (N, C) f32 = rmsnorm(x) * w, rstd (N): the same kernel in the forward and in a recompute.
  void norm_forward(float* out32, float* rstd, const float* x, const void* w, float eps);
  // a (N, F) = silu(gate) * up of the stored gu (compute dtype), through f32 scratch in bf16.
  void swiglu_from_stored(void* a, const void* gu);
  // Document masks of this micro-batch: a document starts at every eos token.
  void build_document_masks(const std::int32_t* tokens, std::int64_t eos);
  // Block l's forward from b.x_in; writes x_out (the next block's input) unless it is null (recompute).
  void block_forward(const BlockActs& b, const std::byte* w, float* x_out, const ModelConfig& cfg,
                     const BlockOffsets& off);
  // Block l's backward: dx holds d loss / d x_out on entry and d loss / d x_in on exit; parameter
  // gradients are ADDED into g (the unit's f32 gradient buffer). Recomputes x_mid, h1, h2, gu and a
  // (BlockActs; x_mid and gu not after a fresh block_forward).
  void block_backward(const BlockActs& b, const std::byte* w, float* g, const BlockOffsets& off, float eps);

 private:
  void attention_forward(const BlockActs& b);
  void attention_backward(const BlockActs& b, const void* dy);
  attention::FlexOptions flex_options(const attention::BlockMask* bm) const;
};

}  // namespace lmcore::model
