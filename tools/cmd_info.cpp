// lmcore info — what this build is and what it runs on.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>

#include "lmcore/core/cpu_capability.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/core/runtime_info.h"
#include "lmcore/version.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_info(int argc, char** argv) {
  CLI::App app{"Version, compiler, SIMD target, BLAS and oneDNN libraries, GEMM path per dtype, thread counts, parts built", "lmcore info"};
  LMCORE_PARSE_ARGS(app, argc, argv);
  fmt::print("lmcore          {}\n", LMCORE_VERSION_STRING);
  fmt::print("compiler        {} ({} build)\n", LMCORE_COMPILER_STRING, LMCORE_BUILD_TYPE_STRING);
  const std::string cap = cpu_capability();
  fmt::print("simd target     {} (supported here: {}{})\n", simd_target_name(), simd_supported_targets(),
             cap != "none" ? fmt::format("; capped by LMCORE_CPU_CAPABILITY={}", cap) : "");
  fmt::print("blas            {}\n", blas_info());
  fmt::print("blas threads    {}\n", blas_num_threads());
  fmt::print("onednn          {}\n", onednn_info());
  fmt::print("gemm f32        {}\n", f32_gemm_path_description());
  fmt::print("gemm bf16       {}\n", lowp_gemm_path_description(DType::bf16));
  fmt::print("gemm f16        {}\n", lowp_gemm_path_description(DType::f16));
  fmt::print("lmcore threads  {}\n", num_threads());
  fmt::print("parts built     {}\n", LMCORE_PARTS_STRING);
  return 0;
}

}  // namespace lmcore::cli
