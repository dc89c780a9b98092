// lmcore/codegen/spec.h — what a generated kernel is specialised for, and the options of the machinery
// that compiles, caches and loads it.
//
//   codegen::RmsNormSpec spec{.hidden = 4096, .eps = 1e-5f, .io = DType::bf16, .out = DType::bf16};
//   auto k = codegen::RmsNormKernel::get(spec);   // compiled (or loaded from the cache), or the generic kernel
//
// A spec is plain data: its to_string() is stable and is what `lmcore codegen list` shows, what a kernel
// library reports back on load (a mismatch fails the load) and part of the cache key.
#pragma once

#include <cstdint>
#include <string>

namespace lmcore::codegen {

// Storage types of a kernel's activations; arithmetic is always f32.
enum class DType : std::uint8_t { f32 = 0, bf16 = 1 };
const char* dtype_name(DType t);
inline std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

// RMSNorm over rows of `hidden` elements (see kernel_abi.h for the formulas).
struct RmsNormSpec {
  std::int64_t hidden = 0;
  float eps = 1e-5f;
  DType io = DType::f32;    // inp, residual, residual_out, dinp
  DType out = DType::f32;   // out, dout
  bool residual = false;    // fuse x = inp + residual before the norm
  std::string to_string() const;  // "rmsnorm C=4096 eps=1e-05 io=bf16 out=bf16 residual=1"
};

// Code-shape choices of a generated kernel; the autotuner picks among them, tests may force one.
struct RmsNormVariant {
  int vector_floats = 0;  // lanes per vector: 8 (AVX2) or 16 (AVX-512); 0 = the widest the CPU has
  int unroll = 4;         // independent accumulators
  std::string to_string() const;
};

// Where compiled kernels live and how they are built. from_env() reads:
//   LMCORE_CACHE_DIR        cache directory          (default ~/.cache/lmcore/kernels)
//   LMCORE_CACHE_MAX_MB     cache size limit, MiB    (default 512; least recently used entries go first)
//   LMCORE_CXX              the compiler             (default: c++ found on PATH)
//   LMCORE_COMPILE_WORKERS  parallel compiles        (default: the core count)
//   LMCORE_COMPILE_TIMEOUT  seconds per compile      (default 60)
//   LMCORE_AUTOTUNE         0 = default variants, no timing (default 1)
//   LMCORE_CODEGEN          0 = never compile, always the generic kernels (default 1)
struct Options {
  std::string cache_dir;
  std::uint64_t cache_max_bytes = 512ull << 20;
  std::string compiler;  // empty = search PATH for c++
  int workers = 0;       // 0 = the core count
  double compile_timeout_seconds = 60;
  bool autotune = true;
  bool enabled = true;
  static Options from_env();
};

}  // namespace lmcore::codegen
