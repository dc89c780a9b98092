// lmcore/codegen/model_kernels.h — the generated kernels one model needs, from its shapes, so that
// `lmcore codegen warm` can compile them all ahead of a run (in parallel) and the trainer then loads
// them from the cache.
//
//   auto sources = codegen::model_kernel_sources({.dim = 384, .ffn_dim = 1024, .eps = 1e-5f});
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
  std::int64_t tokens = 2048;   // rows per micro-batch (batch_size * seq_len): the GEMMs' M
  float eps = 1e-5f;
  DType dtype = DType::f32;     // activations
};

// The RMSNorm specs of the model: the plain norm (the first block's and the final norm) and the norm
// fused with the residual add that precedes it (every other).
std::vector<RmsNormSpec> model_rmsnorm_specs(const ModelShapes& shapes);

// The MLP's GEMMs: gate/up projection with the SwiGLU epilogue (the product kept for the backward),
// the down projection with the residual add (weights in torch Linear layouts, b_trans), and the
// backward's d-input product of the down projection (dx @ Wdown) with the SwiGLU backward epilogue.
std::vector<GemmSpec> model_gemm_specs(const ModelShapes& shapes);

// Sources of every kernel of the model in the variants that will be used (autotuned when
// options.autotune, which may compile and time candidates first; else the defaults).
std::vector<GeneratedSource> model_kernel_sources(const ModelShapes& shapes, const Options& options);

}  // namespace lmcore::codegen
