// lmcore/model/layers.h — the element-wise and row-wise layers of the Llama block, as forward/backward
// pairs on plain f32 buffers (llm.c style). The matrix products live in linear.h, attention in the
// flex attention part.
//
// Shapes are written (rows, columns), row-major and contiguous. N = B * T tokens, C = model dim,
// F = MLP hidden dim. Backward functions ADD into their gradient outputs (d-input and d-weight) and say
// so; nothing is overwritten. Every function here parallelises over rows with lmcore::parallel_for and
// gives the same bits on every run at the same thread count. Each has a plain scalar twin in
// lmcore/model/reference.h that the tests compare against.
#pragma once

#include <cstdint>
#include <vector>

namespace lmcore::model {

// ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight ----
// inp (N, C), weight (C) -> out (N, C), rstd (N) = 1 / sqrt(mean(x^2) + eps), kept for the backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, std::int64_t N, std::int64_t C,
                     float eps);
// dout (N, C); ADDS into dinp (N, C) and dweight (C).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, std::int64_t N, std::int64_t C);

// ---- Rotary position embedding (Hugging Face Llama's rotate_half layout) ----
// For a head vector x of size hd and position t: with h = hd / 2, x1 = x[:h], x2 = x[h:],
//   out1 = x1 * cos - x2 * sin,  out2 = x2 * cos + x1 * sin,   angle(t, i) = t * theta^(-2i / hd).
struct RopeTable {
  std::int64_t max_seq = 0, head_dim = 0;
  std::vector<float> cos, sin;  // (max_seq, head_dim / 2)
  // The angles are computed as Hugging Face does in f32: inv_freq = 1 / theta^(2i / hd), t * inv_freq.
  static RopeTable make(std::int64_t max_seq, std::int64_t head_dim, double theta);
};
// x (N, row_stride): rows of tokens at positions t = n % T; heads [0, n_heads) of head_dim each, starting
// at column 0, are rotated in place (the q and k heads of a fused qkv row).
void rope_forward(float* x, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                  const RopeTable& table);
// The transpose: rotates by -angle, in place (gradients of rotated heads).
void rope_backward(float* dx, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                   const RopeTable& table);

// ---- SwiGLU: out = silu(gate) * up ----
// gu (N, 2F): gate in columns [0, F), up in [F, 2F) (the fused gate/up projection) -> out (N, F).
void swiglu_forward(float* out, const float* gu, std::int64_t N, std::int64_t F);
// dout (N, F) -> dgu (N, 2F), OVERWRITTEN (it is the input of the next GEMM, not a parameter gradient).
void swiglu_backward(float* dgu, const float* dout, const float* gu, std::int64_t N, std::int64_t F);

// ---- Token embedding ----
// tokens (N) in [0, V) -> out (N, C) = weight[token] rows. Throws Error for a token outside [0, V).
void embedding_forward(float* out, const std::int32_t* tokens, const float* weight, std::int64_t N, std::int64_t C,
                       std::int64_t V);
// ADDS dout rows into dweight (V, C) at the tokens' rows. Deterministic: each row sums its tokens in
// position order, one row per task.
void embedding_backward(float* dweight, const float* dout, const std::int32_t* tokens, std::int64_t N, std::int64_t C,
                        std::int64_t V);

}  // namespace lmcore::model
