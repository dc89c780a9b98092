// lmcore/codegen/generator.h — C++ source for a kernel specialised to one spec and variant.
//
// The emitted source is self-contained: kernel_abi.h's text pasted at the top, <string.h> and <math.h>,
// GCC/Clang vector extensions (`float __attribute__((vector_size(64)))`) for the SIMD, and the spec's
// sizes as constants, so that every loop bound is known to the compiler (tails fully unrolled, no
// runtime dispatch). It compiles with any GCC >= 9 or Clang >= 10 and needs no lmcore header.
#pragma once

#include <string>

#include "lmcore/codegen/spec.h"

namespace lmcore::codegen {

struct GeneratedSource {
  std::string kind;     // "rmsnorm", "gemm"
  std::string spec;     // spec.to_string(): what lmcore_kernel_spec() returns, minus the variant
  std::string variant;  // variant.to_string()
  std::string source;   // the translation unit
};

// The text of kernel_abi.h, as pasted into every generated source.
const std::string& kernel_abi_text();

// The widest vector the running CPU has, in floats (16 with AVX-512, 8 with AVX2, else 4), no wider
// than LMCORE_CPU_CAPABILITY allows.
int native_vector_floats();

GeneratedSource generate_rmsnorm(const RmsNormSpec& spec, const RmsNormVariant& variant);
GeneratedSource generate_gemm(const GemmSpec& spec, const GemmVariant& variant);

}  // namespace lmcore::codegen
