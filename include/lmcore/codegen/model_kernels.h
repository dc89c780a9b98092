// lmcore/codegen/model_kernels.h — the generated kernels one model needs, from its shapes, so that
// `lmcore codegen warm` can compile them all ahead of a run (in parallel) and the trainer then loads
// them from the cache.
//
//   auto sources = codegen::model_kernel_sources({.dim = 384, .ffn_dim = 1024});
//   codegen::load_kernels(sources, codegen::Options::from_env(), progress);
#pragma once

#include <cstdint>
#include <vector>

#include "lmcore/codegen/generator.h"
#include "lmcore/codegen/spec.h"

namespace lmcore::codegen {

// What the kernels of a Llama-style block depend on (model::ModelConfig and the trainer's options).
struct ModelShapes {
  std::int64_t dim = 384;       // hidden size: every RMSNorm
  std::int64_t ffn_dim = 1024;  // MLP hidden size
  std::int64_t q_dim = 384;     // attention output: n_heads x head_dim
  std::int64_t qkv_dim = 640;   // q, k and v projections together: q_dim + 2 n_kv_heads x head_dim
  std::int64_t tokens = 2048;   // rows per micro-batch (batch_size * seq_len): the GEMMs' M
  float eps = 1e-5f;
  DType dtype = DType::f32;     // activations
};

// The RMSNorm specs of the model: the plain norm (the first block's and the final norm) and the norm
// fused with the residual add that precedes it (every other).
std::vector<RmsNormSpec> model_rmsnorm_specs(const ModelShapes& shapes);

// The GEMMs of a block whose B is a weight (torch Linear layouts: (out, in)). Forward products use the
// weight transposed (b_trans), the backward's d-input products as stored.
struct ModelGemms {
  GemmSpec gate_up;              // gu = h2 @ Wgu^T, a = SwiGLU(gu) (gu kept for the backward)
  GemmSpec down;                 // x_out = x_mid + a @ Wdown^T
  GemmSpec down_dinput_dswiglu;  // dgu = SwiGLU'(dx @ Wdown, gu): da never goes to memory
  GemmSpec qkv;                  // qkv = h1 @ Wqkv^T
  GemmSpec o_proj;               // x_mid = x_in + y @ Wo^T (forward and the backward's recompute)
  GemmSpec gate_up_dinput;       // dh2 = dgu @ Wgu
  GemmSpec o_dinput;             // dy = dx @ Wo
  GemmSpec qkv_dinput;           // dh1 = dqkv @ Wqkv
  std::vector<GemmSpec> all() const;
};
ModelGemms model_gemms(const ModelShapes& shapes);

// model_gemms(shapes).all().
std::vector<GemmSpec> model_gemm_specs(const ModelShapes& shapes);

// Sources of every kernel of the model in the variants that will be used (autotuned when
// options.autotune, which may compile and time candidates first; else the defaults).
std::vector<GeneratedSource> model_kernel_sources(const ModelShapes& shapes, const Options& options);

}  // namespace lmcore::codegen
