// One transformer block's forward and backward, with the buffer each step reads and writes.
//   N = B * T tokens, C = dim, Q = n_heads * hd, QKV = Q + 2 * n_kv_heads * hd, F = ffn_dim.
// Scratch: sA, sB, sC are f32, cA, cB compute dtype, N rows each, as wide as their uses below (the
// widths are planned in llama.cpp); in f32 as_compute returns its source, so cA, cB (aliases of sA, sB)
// are never written.
#include <cstring>

#include "lmcore/attention/flex_attention.h"
#include "lmcore/core/error.h"
#include "src/model/gemm.h"
#include "src/model/llama_impl.h"

namespace lmcore::model {

using attention::BlockMask;
using attention::FlexOptions;
using attention::MaskMod;

void Llama::Impl::build_document_masks(const std::int32_t* tokens, std::int64_t eos) {
  doc_masks.clear();
  for (std::int64_t b = 0; b < B; ++b) {
    // Document ids: position t belongs to the number of eos tokens in [0, t] (llm.c puts the
    // end-of-text token at the start of each document).
    std::vector<std::int64_t> ids(static_cast<std::size_t>(T));
    std::int64_t doc = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      if (tokens[b * T + t] == eos) ++doc;
      ids[static_cast<std::size_t>(t)] = doc;
    }
    doc_masks.push_back(attention::create_block_mask(MaskMod::document(std::move(ids)) & MaskMod::causal(), 1, 1, T, T));
  }
}

FlexOptions Llama::Impl::flex_options(const BlockMask* bm) const {
  FlexOptions opt;
  opt.block_mask = bm;
  opt.return_lse = true;
  opt.score_mod_grads = false;
  return opt;
}

// q, k, v of qkv (B, T, Hq + 2 Hkv, hd) as (B, H, T, hd) views; y (B, T, Hq, hd) as (B, Hq, T, hd).
// Flex attention reads the views through their strides and writes its f32 output straight into y (f32)
// or into sA in y's layout, then rounded into y (bf16): no per-call copies.
void Llama::Impl::attention_forward(const BlockActs& b) {
  const Tensor qkv_t = ct_tensor(b.qkv, {B, T, Hq + 2 * Hkv, hd});
  const Tensor q = qkv_t.narrow(2, 0, Hq).permute({0, 2, 1, 3});
  const Tensor k = qkv_t.narrow(2, Hq, Hkv).permute({0, 2, 1, 3});
  const Tensor v = qkv_t.narrow(2, Hq + Hkv, Hkv).permute({0, 2, 1, 3});
  float* y32 = f32() ? static_cast<float*>(b.y) : sA;
  const Tensor y_t = Tensor::from_blob(y32, {B, T, Hq, hd}, DType::f32, nullptr).permute({0, 2, 1, 3});
  const Tensor lse_t = Tensor::from_blob(b.lse, {B, Hq, T}, DType::f32, nullptr);
  if (doc_masks.empty()) {
    attention::flex_attention_into(q, k, v, y_t, lse_t, flex_options(&mask));
  } else {
    for (std::int64_t i = 0; i < B; ++i)
      attention::flex_attention_into(q.narrow(0, i, 1), k.narrow(0, i, 1), v.narrow(0, i, 1), y_t.narrow(0, i, 1),
                                     lse_t.narrow(0, i, 1), flex_options(&doc_masks[static_cast<std::size_t>(i)]));
  }
  store(b.y, y32, N * Q);
}

// dy (N, Q) compute dtype -> dqkv (N, QKV) f32 in sA, with RoPE's transpose applied to the q and k heads.
// Flex attention writes dq, dk, dv straight into sA; in bf16 they are then rounded to bf16 (through cB,
// free here), as the bf16 gradients of bf16 q, k, v are.
void Llama::Impl::attention_backward(const BlockActs& b, const void* dy) {
  const Tensor qkv_t = ct_tensor(b.qkv, {B, T, Hq + 2 * Hkv, hd});
  const Tensor q = qkv_t.narrow(2, 0, Hq).permute({0, 2, 1, 3});
  const Tensor k = qkv_t.narrow(2, Hq, Hkv).permute({0, 2, 1, 3});
  const Tensor v = qkv_t.narrow(2, Hq + Hkv, Hkv).permute({0, 2, 1, 3});
  const Tensor y_t = ct_tensor(b.y, {B, T, Hq, hd}).permute({0, 2, 1, 3});
  const Tensor dy_t = ct_tensor(const_cast<void*>(dy), {B, T, Hq, hd}).permute({0, 2, 1, 3});
  const Tensor lse_t = Tensor::from_blob(b.lse, {B, Hq, T}, DType::f32, nullptr);
  const Tensor d_t = Tensor::from_blob(sA, {B, T, Hq + 2 * Hkv, hd}, DType::f32, nullptr);
  const Tensor dq = d_t.narrow(2, 0, Hq).permute({0, 2, 1, 3});
  const Tensor dk = d_t.narrow(2, Hq, Hkv).permute({0, 2, 1, 3});
  const Tensor dv = d_t.narrow(2, Hq + Hkv, Hkv).permute({0, 2, 1, 3});
  if (doc_masks.empty()) {
    attention::flex_attention_backward_into(q, k, v, y_t, lse_t, dy_t, dq, dk, dv, flex_options(&mask));
  } else {
    for (std::int64_t i = 0; i < B; ++i)
      attention::flex_attention_backward_into(q.narrow(0, i, 1), k.narrow(0, i, 1), v.narrow(0, i, 1),
                                              y_t.narrow(0, i, 1), lse_t.narrow(0, i, 1), dy_t.narrow(0, i, 1),
                                              dq.narrow(0, i, 1), dk.narrow(0, i, 1), dv.narrow(0, i, 1),
                                              flex_options(&doc_masks[static_cast<std::size_t>(i)]));
  }
  if (!f32()) {
    store(cB, sA, N * QKV);
    Tensor::from_blob(sA, {N * QKV}, DType::f32, nullptr).copy_(ct_tensor(cB, {N * QKV}));
  }
  rope_backward(sA, N, T, QKV, Hq + Hkv, rope);
}

void Llama::Impl::norm_forward(float* out32, float* rstd, const float* x, const void* w, float eps) {
  if (cg) cg->norm.forward(out32, rstd, x, nullptr, nullptr, norm_weight(w), N);
  else rmsnorm_forward(out32, rstd, x, norm_weight(w), N, C, eps);
}

void Llama::Impl::o_proj_forward(const BlockActs& b, const std::byte* wo) {
  if (cg) {  // f32: the residual added to each tile of the product while it is in cache
    cg->o_proj.run({.a = static_cast<const float*>(b.y), .lda = Q, .b = reinterpret_cast<const float*>(wo), .ldb = Q,
                    .c = b.x_mid, .ldc = C, .residual = b.x_in, .ldr = C}, N);
    return;
  }
  std::memcpy(b.x_mid, b.x_in, static_cast<std::size_t>(N * C) * 4);
  detail::gemm(ct, false, true, N, C, Q, 1.0f, b.y, Q, wo, Q, 1.0f, b.x_mid, C);
}

void Llama::Impl::swiglu_from_stored(void* a, const void* gu) {
  if (f32()) {
    swiglu_forward(static_cast<float*>(a), static_cast<const float*>(gu), N, F);
    return;
  }
  swiglu_forward(sC, as_f32(gu, sA, N * 2 * F), N, F);  // sA: gu widened, still there for swiglu_backward
  store(a, sC, N * F);
}

void Llama::Impl::block_forward(const BlockActs& b, const std::byte* w, float* x_out, const ModelConfig& cfg,
                                const BlockOffsets& off) {
  const float eps = static_cast<float>(cfg.norm_eps);
  const std::byte* wqkv = w + off.wqkv * cs;
  const std::byte* wo = w + off.wo * cs;
  const std::byte* wgu = w + off.wgu * cs;
  const std::byte* wdown = w + off.wdown * cs;
  // h1 (N, C) = rmsnorm(x_in) * input_norm
  float* h1_32 = f32() ? static_cast<float*>(b.h1) : sA;
  norm_forward(h1_32, b.rstd1, b.x_in, w + off.input_norm * cs, eps);
  store(b.h1, h1_32, N * C);
  // qkv (N, QKV) = h1 @ Wqkv^T, then RoPE on the q and k heads
  float* qkv_32 = f32() ? static_cast<float*>(b.qkv) : sA;
  if (cg)
    cg->qkv.run({.a = static_cast<const float*>(b.h1), .lda = C, .b = reinterpret_cast<const float*>(wqkv), .ldb = C,
                 .c = qkv_32, .ldc = QKV}, N);
  else
    detail::gemm(ct, false, true, N, QKV, C, 1.0f, b.h1, C, wqkv, C, 0.0f, qkv_32, QKV);
  rope_forward(qkv_32, N, T, QKV, Hq + Hkv, rope);
  store(b.qkv, qkv_32, N * QKV);
  // y (N, Q) = attention(q, k, v); lse (B, Hq, T)
  attention_forward(b);
  o_proj_forward(b, wo);
  // h2 (N, C) = rmsnorm(x_mid) * post_norm
  float* h2_32 = f32() ? static_cast<float*>(b.h2) : sA;
  norm_forward(h2_32, b.rstd2, b.x_mid, w + off.post_norm * cs, eps);
  store(b.h2, h2_32, N * C);
  // gu (N, 2F) = h2 @ Wgu^T;  a (N, F) = silu(gate) * up
  float* gu_32 = f32() ? static_cast<float*>(b.gu) : sA;
  if (cg) {  // f32: gu and a in one pass, SwiGLU applied to each tile of gu while it is in cache
    cg->gate_up.run({.a = static_cast<const float*>(b.h2), .lda = C, .b = reinterpret_cast<const float*>(wgu),
                     .ldb = C, .c = static_cast<float*>(b.a), .ldc = F, .pre = gu_32, .ldp = 2 * F}, N);
  } else {
    detail::gemm(ct, false, true, N, 2 * F, C, 1.0f, b.h2, C, wgu, C, 0.0f, gu_32, 2 * F);
    store(b.gu, gu_32, N * 2 * F);
    // From gu as stored (rounded to bf16 in bf16), so that the backward's recompute gives the same a.
    swiglu_from_stored(b.a, b.gu);
  }
  if (x_out == nullptr) return;
  // x_out (N, C) = x_mid + a @ Wdown^T
  if (cg) {
    cg->down.run({.a = static_cast<const float*>(b.a), .lda = F, .b = reinterpret_cast<const float*>(wdown), .ldb = F,
                  .c = x_out, .ldc = C, .residual = b.x_mid, .ldr = C}, N);
    return;
  }
  std::memcpy(x_out, b.x_mid, static_cast<std::size_t>(N * C) * 4);
  detail::gemm(ct, false, true, N, C, F, 1.0f, b.a, F, wdown, F, 1.0f, x_out, C);
}

void Llama::Impl::block_backward(const BlockActs& b, const std::byte* w, float* g, const BlockOffsets& off,
                                 float eps) {
  const std::byte* wqkv = w + off.wqkv * cs;
  const std::byte* wo = w + off.wo * cs;
  const std::byte* wgu = w + off.wgu * cs;
  const std::byte* wdown = w + off.wdown * cs;
  // x_mid (N, C) = x_in + y @ Wo^T, h2 (N, C) = rmsnorm(x_mid) (rstd2 rewritten with the same values)
  // and gu (N, 2F) = h2 @ Wgu^T again, as the forward formed them (after a fresh block_forward only h2,
  // which shares its buffer with h1)
  if (!recompute) o_proj_forward(b, wo);
  float* h2_32 = f32() ? static_cast<float*>(b.h2) : sA;
  norm_forward(h2_32, b.rstd2, b.x_mid, w + off.post_norm * cs, eps);
  store(b.h2, h2_32, N * C);
  if (!keep_gu && !recompute) {
    float* gu_32 = f32() ? static_cast<float*>(b.gu) : sA;
    detail::gemm(ct, false, true, N, 2 * F, C, 1.0f, b.h2, C, wgu, C, 0.0f, gu_32, 2 * F);
    store(b.gu, gu_32, N * 2 * F);
  }
  // ---- MLP: x_out = x_mid + a @ Wdown^T ----
  const void* dx_c = as_compute(dx, cB, N * C);
  // a (N, F) recomputed from gu (with codegen it is kept per block); in bf16 this leaves gu in f32 in sA.
  if (!keep_a) swiglu_from_stored(b.a, b.gu);
  if (cg) {
    // f32: dgu (N, 2F) in sC = swiglu'(dx @ Wdown, gu), the SwiGLU backward applied to each tile of da
    // while it is in cache (da never goes to memory);  dWdown (C, F) += dx^T @ a
    cg->down_dinput_dswiglu.run({.a = dx, .lda = C, .b = reinterpret_cast<const float*>(wdown), .ldb = F, .c = sC,
                                 .ldc = 2 * F, .aux = static_cast<const float*>(b.gu), .ldx = 2 * F}, N);
    detail::gemm(ct, true, false, C, F, N, 1.0f, dx_c, C, b.a, F, 1.0f, g + off.wdown, F);
  } else {
    // da (N, F) = dx @ Wdown;  dWdown (C, F) += dx^T @ a
    detail::gemm(ct, false, false, N, F, C, 1.0f, dx_c, C, wdown, F, 0.0f, sB, F);
    detail::gemm(ct, true, false, C, F, N, 1.0f, dx_c, C, b.a, F, 1.0f, g + off.wdown, F);
    // dgu (N, 2F) from da and the saved gate | up
    const float* gu32 = f32() ? static_cast<const float*>(b.gu) : keep_a ? as_f32(b.gu, sA, N * 2 * F) : sA;
    swiglu_backward(sC, sB, gu32, N, F);
  }
  const void* dgu_c = as_compute(sC, cA, N * 2 * F);
  // dh2 (N, C) = dgu @ Wgu;  dWgu (2F, C) += dgu^T @ h2
  if (cg)
    cg->gate_up_dinput.run({.a = sC, .lda = 2 * F, .b = reinterpret_cast<const float*>(wgu), .ldb = C, .c = sB, .ldc = C},
                           N);
  else
    detail::gemm(ct, false, false, N, C, 2 * F, 1.0f, dgu_c, 2 * F, wgu, C, 0.0f, sB, C);
  detail::gemm(ct, true, false, 2 * F, C, N, 1.0f, dgu_c, 2 * F, b.h2, C, 1.0f, g + off.wgu, C);
  // dx += rmsnorm'(dh2);  d post_norm += ...
  if (cg) cg->norm.backward(dx, g + off.post_norm, sB, b.x_mid, norm_weight(w + off.post_norm * cs), b.rstd2, N);
  else rmsnorm_backward(dx, g + off.post_norm, sB, b.x_mid, norm_weight(w + off.post_norm * cs), b.rstd2, N, C);
  // ---- attention: x_mid = x_in + y @ Wo^T ----
  dx_c = as_compute(dx, cB, N * C);
  // dy (N, Q) = dx @ Wo;  dWo (C, Q) += dx^T @ y
  // (dy must not share memory with sA, where the per-row backward of document masks writes dqkv while
  // later rows still read dy.)
  if (cg)
    cg->o_dinput.run({.a = dx, .lda = C, .b = reinterpret_cast<const float*>(wo), .ldb = Q, .c = sB, .ldc = Q}, N);
  else
    detail::gemm(ct, false, false, N, Q, C, 1.0f, dx_c, C, wo, Q, 0.0f, sB, Q);
  detail::gemm(ct, true, false, C, Q, N, 1.0f, dx_c, C, b.y, Q, 1.0f, g + off.wo, Q);
  const void* dy_c = as_compute(sB, cA, N * Q);
  // dqkv (N, QKV) f32 in sA, through flex attention's backward and RoPE's transpose
  attention_backward(b, dy_c);
  const void* dqkv_c = as_compute(sA, cB, N * QKV);
  // h1 (N, C) recomputed from x_in: f32 scratch sC is free
  float* h1_32 = f32() ? static_cast<float*>(b.h1) : sC;
  norm_forward(h1_32, b.rstd1, b.x_in, w + off.input_norm * cs, eps);
  store(b.h1, h1_32, N * C);
  // dh1 (N, C) = dqkv @ Wqkv;  dWqkv (QKV, C) += dqkv^T @ h1
  if (cg)
    cg->qkv_dinput.run({.a = sA, .lda = QKV, .b = reinterpret_cast<const float*>(wqkv), .ldb = C, .c = sC, .ldc = C}, N);
  else
    detail::gemm(ct, false, false, N, C, QKV, 1.0f, dqkv_c, QKV, wqkv, C, 0.0f, sC, C);
  detail::gemm(ct, true, false, QKV, C, N, 1.0f, dqkv_c, QKV, b.h1, C, 1.0f, g + off.wqkv, C);
  // dx += rmsnorm'(dh1);  d input_norm += ...
  if (cg) cg->norm.backward(dx, g + off.input_norm, sC, b.x_in, norm_weight(w + off.input_norm * cs), b.rstd1, N);
  else rmsnorm_backward(dx, g + off.input_norm, sC, b.x_in, norm_weight(w + off.input_norm * cs), b.rstd1, N, C);
}

}  // namespace lmcore::model
