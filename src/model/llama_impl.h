// Private: the state behind lmcore::model::Llama, shared by llama.cpp (construction, arena) and
// block.cpp (forward and backward).
#pragma once

#include <memory>
#include <vector>

#include "lmcore/attention/block_mask.h"
#include "lmcore/codegen/gemm.h"
#include "lmcore/codegen/rmsnorm.h"
#include "lmcore/model/llama.h"

namespace lmcore::model {

// The model's own flat buffers.
class LocalAccess final : public UnitAccess {
 public:
  LocalAccess(const ParameterLayout& layout, const Tensor& weights, const Tensor& grads)
      : layout_(layout), weights_(weights), grads_(grads) {}
  const void* weights(int unit) override {
    return static_cast<const std::byte*>(weights_.data_ptr()) + layout_.units()[unit].offset * weights_.itemsize();
  }
  float* grads(int unit) override { return grads_.data<float>() + layout_.units()[unit].offset; }

 private:
  const ParameterLayout& layout_;
  Tensor weights_, grads_;
};

// Saved activations of one block. With recompute every block but x_in points at the shared scratch.
struct BlockActs {
  float* x_in = nullptr;   // (N, C) the block's input (residual stream)
  float* rstd1 = nullptr;  // (N)
  void* h1 = nullptr;      // (N, C) compute dtype: rmsnorm(x_in) * input_norm
  void* qkv = nullptr;     // (N, QKV) compute dtype: q and k after RoPE, v
  void* y = nullptr;       // (N, Q) compute dtype: attention output as (B, T, Hq, hd)
  float* lse = nullptr;    // (B, Hq, T)
  float* x_mid = nullptr;  // (N, C) x_in + o_proj(y)
  float* rstd2 = nullptr;  // (N)
  void* h2 = nullptr;      // (N, C) compute dtype
  void* gu = nullptr;      // (N, 2F) compute dtype: gate | up
  void* a = nullptr;       // (N, F) compute dtype: silu(gate) * up
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
  Tensor targets64;          // (N) i64 for the loss
  std::unique_ptr<LocalAccess> local;
  UnitAccess* access = nullptr;
  std::vector<float> norm_w;  // one norm weight in f32 (bf16 compute)
  // ModelOptions::codegen: the blocks' RMSNorm, gate/up with SwiGLU (gu kept), down with the residual.
  struct Codegen {
    codegen::RmsNormKernel norm;
    codegen::GemmKernel gate_up, down;
  };
  std::unique_ptr<Codegen> cg;

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

  // ---- block.cpp ----
  // Document masks of this micro-batch: a document starts at every eos token.
  void build_document_masks(const std::int32_t* tokens, std::int64_t eos);
  // Block l's forward from b.x_in; writes x_out (the next block's input) unless it is null (recompute).
  void block_forward(const BlockActs& b, const std::byte* w, float* x_out, const ModelConfig& cfg,
                     const BlockOffsets& off);
  // Block l's backward: dx holds d loss / d x_out on entry and d loss / d x_in on exit; parameter
  // gradients are ADDED into g (the unit's f32 gradient buffer).
  void block_backward(const BlockActs& b, const std::byte* w, float* g, const BlockOffsets& off);

 private:
  void attention_forward(const BlockActs& b);
  void attention_backward(const BlockActs& b, const void* dy);
  attention::FlexOptions flex_options(const attention::BlockMask* bm) const;
};

}  // namespace lmcore::model
