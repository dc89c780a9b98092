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

// Activation of a GEMM epilogue (see kernel_abi.h).
// dswiglu is the SwiGLU backward as the epilogue of the product dA (M, N): it reads gate | up (aux) and
// writes d gate | d up (M, 2N).
enum class Act : std::uint8_t { none = 0, silu = 1, gelu = 2, swiglu = 3, dswiglu = 4 };
const char* act_name(Act a);

// C (M, N) = epilogue(A (M, K) @ op(B)); M is a run-time argument, N and K are baked in.
struct GemmSpec {
  std::int64_t N = 0, K = 0;
  bool b_trans = true;     // B stored (NB, K) as a torch Linear weight (false: (K, NB))
  bool bias = false;
  Act act = Act::none;     // swiglu: NB = 2N (gate columns, then up columns)
  bool residual = false;   // C += residual
  bool store_pre = false;  // also write the product P (M, NB) (+ bias) before the activation
  std::int64_t nb() const { return act == Act::swiglu ? 2 * N : N; }           // columns of the product
  std::int64_t out_cols() const { return act == Act::dswiglu ? 2 * N : N; }  // columns of C
  std::string to_string() const;  // "gemm N=1024 K=384 bt=1 bias=0 act=swiglu res=0 pre=1"
};

// The GEMM core and its tiles. "blas": sgemm (OpenBLAS, single-threaded) per tile_m x tile_n output
// tile, the epilogue right after each; "micro": generated register-blocked micro-kernel of micro_m rows
// x micro_nv vectors over B packed once per product (shared by the threads) and A packed per block of
// block_m rows, in passes of block_k over K; the block's tiles go through the epilogue from L1/L2.
struct GemmVariant {
  enum Core : std::uint8_t { blas = 0, micro = 1 } core = blas;
  int tile_m = 32, tile_n = 256;  // blas
  int micro_m = 4;                // micro: rows per register block (1..16)
  int micro_nv = 2;               // micro: vectors per row of the register block (1..4)
  int block_m = 96;               // micro: rows of A packed together (a multiple of micro_m)
  int block_k = 0;                // micro: k per pass over a panel (0 = all of K; else a B sliver of
                                  // block_k x NR stays in L1 while the strips of A pass over it)
  int vector_floats = 0;          // micro: lanes (0 = the widest the CPU has)
  std::string to_string() const;  // "blas 32x256", "micro 12x2 W=16 MC=96 KC=192"
  static GemmVariant parse(const std::string& s);  // inverse of to_string; throws Error
};

// Where compiled kernels live and how they are built. from_env() reads:
//   LMCORE_CACHE_DIR        cache directory          (default ~/.cache/lmcore/kernels)
//   LMCORE_CACHE_MAX_MB     cache size limit, MiB    (default 512, at most 2^30; least recently used go first)
//   LMCORE_CXX              the compiler             (default: c++ found on PATH)
//   LMCORE_COMPILE_WORKERS  parallel compiles        (an integer in [0, 1024]; default and 0: the core count)
//   LMCORE_COMPILE_TIMEOUT  seconds per compile      (default 60, in [0.001, 86400])
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
