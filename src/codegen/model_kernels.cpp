#include "lmcore/codegen/model_kernels.h"

#include "lmcore/codegen/rmsnorm.h"

namespace lmcore::codegen {

std::vector<RmsNormSpec> model_rmsnorm_specs(const ModelShapes& s) {
  return {{s.dim, s.eps, s.dtype, s.dtype, false}, {s.dim, s.eps, s.dtype, s.dtype, true}};
}

std::vector<GeneratedSource> model_kernel_sources(const ModelShapes& shapes, const Options& /*options*/) {
  std::vector<GeneratedSource> out;
  for (const auto& spec : model_rmsnorm_specs(shapes)) out.push_back(generate_rmsnorm(spec, default_rmsnorm_variant()));
  return out;
}

}  // namespace lmcore::codegen
