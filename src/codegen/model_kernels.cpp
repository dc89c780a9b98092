#include "lmcore/codegen/model_kernels.h"

#include "lmcore/codegen/gemm.h"
#include "lmcore/codegen/rmsnorm.h"

namespace lmcore::codegen {

std::vector<RmsNormSpec> model_rmsnorm_specs(const ModelShapes& s) {
  return {{s.dim, s.eps, s.dtype, s.dtype, false}, {s.dim, s.eps, s.dtype, s.dtype, true}};
}

ModelGemms model_gemms(const ModelShapes& s) {
  const std::int64_t C = s.dim, F = s.ffn_dim, Q = s.q_dim, QKV = s.qkv_dim;
  ModelGemms g;
  g.gate_up = {F, C, true, false, Act::swiglu, false, true};
  g.down = {C, F, true, false, Act::none, true, false};
  g.down_dinput_dswiglu = {F, C, false, false, Act::dswiglu, false, false};
  g.qkv = {QKV, C, true, false, Act::none, false, false};
  g.o_proj = {C, Q, true, false, Act::none, true, false};
  g.gate_up_dinput = {C, 2 * F, false, false, Act::none, false, false};
  g.o_dinput = {Q, C, false, false, Act::none, false, false};
  g.qkv_dinput = {C, QKV, false, false, Act::none, false, false};
  return g;
}

std::vector<GemmSpec> ModelGemms::all() const {
  return {gate_up, down, down_dinput_dswiglu, qkv, o_proj, gate_up_dinput, o_dinput, qkv_dinput};
}

std::vector<GemmSpec> model_gemm_specs(const ModelShapes& s) { return model_gemms(s).all(); }

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
