#include "lmcore/codegen/model_kernels.h"

#include "lmcore/codegen/gemm.h"
#include "lmcore/codegen/rmsnorm.h"

namespace lmcore::codegen {

std::vector<RmsNormSpec> model_rmsnorm_specs(const ModelShapes& s) {
  return {{s.dim, s.eps, s.dtype, s.dtype, false}, {s.dim, s.eps, s.dtype, s.dtype, true}};
}

std::vector<GemmSpec> model_gemm_specs(const ModelShapes& s) {
  return {{s.ffn_dim, s.dim, true, false, Act::swiglu, false, true},
          {s.dim, s.ffn_dim, true, false, Act::none, true, false},
          {s.ffn_dim, s.dim, false, false, Act::dswiglu, false, false}};
}

std::vector<GeneratedSource> model_kernel_sources(const ModelShapes& shapes, const Options& options) {
  std::vector<GeneratedSource> out;
  for (const auto& spec : model_rmsnorm_specs(shapes))
    out.push_back(generate_rmsnorm(spec, rmsnorm_variant_for(spec, options)));
  // The GEMMs run on f32 activations (bf16 models widen before their products here).
  for (const auto& spec : model_gemm_specs(shapes))
    out.push_back(generate_gemm(spec, gemm_variant_for(spec, shapes.tokens, options)));
  return out;
}

}  // namespace lmcore::codegen
