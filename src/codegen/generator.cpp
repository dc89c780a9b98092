// The RMSNorm template. The emitted code is written for the vectoriser-free path: explicit vector
// extension types, W lanes by U independent accumulators (a dependent chain of FMAs would wait 4 cycles
// per add; U of them keep both FMA ports busy), the hidden size a constant so that the tail after the
// last full vector is a fixed, fully unrolled scalar loop.
#include "lmcore/codegen/generator.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "lmcore/codegen/compiler.h"
#include "lmcore/core/error.h"

namespace lmcore::codegen {

namespace detail {
extern const char* const kernel_abi_text_raw;
}

const char* dtype_name(DType t) { return t == DType::f32 ? "f32" : "bf16"; }

std::string RmsNormSpec::to_string() const {
  return fmt::format("rmsnorm C={} eps={} io={} out={} residual={}", hidden, eps, dtype_name(io), dtype_name(out),
                     residual ? 1 : 0);
}

std::string RmsNormVariant::to_string() const { return fmt::format("W={} U={}", vector_floats, unroll); }

const std::string& kernel_abi_text() {
  static const std::string text = detail::kernel_abi_text_raw;
  return text;
}

int native_vector_floats() {
  int widest = 4;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) widest = 16;
  else if (__builtin_cpu_supports("avx2")) widest = 8;
#endif
  // The kernels are compiled without the instructions LMCORE_CPU_CAPABILITY caps, so their natural
  // width follows the cap too.
  return std::min(widest, capability_limit().widest_floats);
}

namespace {

// A float constant written exactly (hex float), so the kernel sees the very same eps.
std::string exact_float(float v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(v));
  return buf;
}

// Loads/stores of W lanes and of one element, f32 or bf16 (NaN -> 0xFFFF, as torch 1.13 and
// lmcore::bf16 do; round to nearest even otherwise).
const char* kVectorHelpers = R"(
typedef float vf __attribute__((vector_size(W * 4)));
typedef uint32_t vu __attribute__((vector_size(W * 4)));
typedef uint16_t vh __attribute__((vector_size(W * 2)));

static inline vf ld_f32(const float* p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void st_f32(float* p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf ld_bf16(const uint16_t* p) {
#if W == 16 && defined(__AVX512F__)
  // One widening load: GCC compiles the generic form below into two half-width ones and an insert
  // (the bf16 RMSNorm forward spent a quarter of its time there).
  return (vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16);
#elif W == 8 && defined(__AVX2__)
  return (vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16);
#else
  vh h; memcpy(&h, p, sizeof h);
  return (vf)(__builtin_convertvector(h, vu) << 16);
#endif
}
static inline vh bf16_bits_int(vf v) {
  const vu u = (vu)v;
  vu r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
  r = (r & ~nan) | (nan & 0xffffu);
  return __builtin_convertvector(r, vh);
}
// The CPU's own conversion where it has one (AVX512-BF16: round to nearest even, one instruction).
// It flushes subnormals to zero and keeps NaN payloads, so a vector holding either takes the integer
// path above: the bits are the same either way.
static inline vh bf16_bits(vf v) {
#if W == 16 && defined(__AVX512BF16__) && defined(__AVX512DQ__)
  if (__builtin_expect(_mm512_fpclass_ps_mask((__m512)v, 0x01 | 0x20 | 0x80) != 0, 0)) return bf16_bits_int(v);
  return (vh)(__m256i)_mm512_cvtneps_pbh((__m512)v);
#elif W == 8 && defined(__AVX512BF16__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
  if (__builtin_expect(_mm256_fpclass_ps_mask((__m256)v, 0x01 | 0x20 | 0x80) != 0, 0)) return bf16_bits_int(v);
  return (vh)(__m128i)_mm256_cvtneps_pbh((__m256)v);
#else
  return bf16_bits_int(v);
#endif
}
static inline void st_bf16(uint16_t* p, vf v) { vh h = bf16_bits(v); memcpy(p, &h, sizeof h); }
static inline vf round_bf16(vf v) { return (vf)(__builtin_convertvector(bf16_bits(v), vu) << 16); }

static inline float ld1_f32(const float* p) { return *p; }
static inline void st1_f32(float* p, float v) { *p = v; }
static inline float ld1_bf16(const uint16_t* p) { uint32_t u = (uint32_t)*p << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t bf16_bits1(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0xffffu;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline void st1_bf16(uint16_t* p, float v) { *p = bf16_bits1(v); }
static inline float round1_bf16(float v) { const uint16_t h = bf16_bits1(v); return ld1_bf16(&h); }
static inline vf splat(float s) { const vf z = {}; return s - z; }  // s - 0 is s exactly: one broadcast
static inline float hsum(vf v) { float s = 0; for (int l = 0; l < W; ++l) s += v[l]; return s; }
)";

}  // namespace

GeneratedSource generate_rmsnorm(const RmsNormSpec& spec, const RmsNormVariant& variant) {
  LMCORE_CHECK(spec.hidden >= 1, "codegen rmsnorm: hidden size must be >= 1, found {}", spec.hidden);
  LMCORE_CHECK(variant.vector_floats == 4 || variant.vector_floats == 8 || variant.vector_floats == 16,
               "codegen rmsnorm: vector_floats must be 4, 8 or 16, found {}", variant.vector_floats);
  LMCORE_CHECK(variant.unroll >= 1 && variant.unroll <= 8, "codegen rmsnorm: unroll must be in [1, 8], found {}",
               variant.unroll);
  const bool io_bf16 = spec.io == DType::bf16, out_bf16 = spec.out == DType::bf16;
  const char* io_t = io_bf16 ? "uint16_t" : "float";
  const char* out_t = out_bf16 ? "uint16_t" : "float";
  const char* io = io_bf16 ? "bf16" : "f32";
  const char* ot = out_bf16 ? "bf16" : "f32";

  GeneratedSource g;
  g.kind = "rmsnorm";
  g.spec = spec.to_string();
  g.variant = variant.to_string();
  std::string& s = g.source;
  s += "// Generated by lmcore codegen: " + g.spec + ", " + g.variant + "\n";
  s += kernel_abi_text();
  s += "\n#include <string.h>\n#include <math.h>\n#if defined(__x86_64__)\n#include <immintrin.h>\n#endif\n\n";
  s += "#define LMC_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n";
  s += fmt::format("static const int64_t C = {};\nstatic const float EPS = {};\n", spec.hidden, exact_float(spec.eps));
  s += fmt::format("#define W {}\n#define U {}\n", variant.vector_floats, variant.unroll);
  s += "static const int64_t CU = C / (W * U) * (W * U);  // columns covered by the unrolled loop\n";
  s += "static const int64_t CW = C / W * W;              // columns covered by whole vectors\n";
  s += fmt::format("typedef {} io_t;\ntypedef {} out_t;\n", io_t, out_t);
  s += kVectorHelpers;
  // x = inp (+ residual, rounded to the io dtype and stored) at column i, vector and scalar forms.
  s += fmt::format("static inline vf ld_io(const io_t* p) {{ return ld_{0}(p); }}\n"
                   "static inline float ld1_io(const io_t* p) {{ return ld1_{0}(p); }}\n"
                   "static inline void st_io(io_t* p, vf v) {{ st_{0}(p, v); }}\n"
                   "static inline void st1_io(io_t* p, float v) {{ st1_{0}(p, v); }}\n"
                   "static inline vf ld_out(const out_t* p) {{ return ld_{1}(p); }}\n"
                   "static inline float ld1_out(const out_t* p) {{ return ld1_{1}(p); }}\n"
                   "static inline void st_out(out_t* p, vf v) {{ st_{1}(p, v); }}\n"
                   "static inline void st1_out(out_t* p, float v) {{ st1_{1}(p, v); }}\n",
                   io, ot);
  if (spec.residual) {
    s += fmt::format(
        "static inline vf ld_x(const io_t* x, const io_t* r, io_t* xo, int64_t i) {{\n"
        "  vf v = ld_io(x + i) + ld_io(r + i);\n{0}  st_io(xo + i, v);\n  return v;\n}}\n"
        "static inline float ld1_x(const io_t* x, const io_t* r, io_t* xo, int64_t i) {{\n"
        "  float v = ld1_io(x + i) + ld1_io(r + i);\n{1}  st1_io(xo + i, v);\n  return v;\n}}\n",
        io_bf16 ? "  v = round_bf16(v);\n" : "", io_bf16 ? "  v = round1_bf16(v);\n" : "");
  } else {
    s += "static inline vf ld_x(const io_t* x, const io_t*, io_t*, int64_t i) { return ld_io(x + i); }\n"
         "static inline float ld1_x(const io_t* x, const io_t*, io_t*, int64_t i) { return ld1_io(x + i); }\n";
  }
  s += R"(
LMC_EXPORT int lmcore_kernel_abi_version(void) { return LMCORE_KERNEL_ABI_VERSION; }
)";
  s += "LMC_EXPORT const char* lmcore_kernel_spec(void) { return \"" + g.spec + "\"; }\n";
  s += R"(
// Pass 1 sums x^2 in U x W lanes (and writes the residual sum when fused); pass 2 scales x, re-read
// from the row just written (in L1/L2 for any hidden size a model uses).
LMC_EXPORT void lmcore_rmsnorm_forward(const lmcore_rmsnorm_forward_args* a) {
  const float* const w = a->weight;  // held in a register: the stores to out could alias *a
  for (int64_t n = a->row_begin; n < a->row_end; ++n) {
    const io_t* x = (const io_t*)a->inp + n * C;
    const io_t* r = a->residual ? (const io_t*)a->residual + n * C : 0;
    io_t* xo = a->residual_out ? (io_t*)a->residual_out + n * C : 0;
    out_t* o = (out_t*)a->out + n * C;
    vf acc[U];
    for (int u = 0; u < U; ++u) acc[u] = splat(0);
    int64_t i = 0;
    for (; i < CU; i += W * U)
      for (int u = 0; u < U; ++u) { const vf v = ld_x(x, r, xo, i + u * W); acc[u] += v * v; }
    for (; i < CW; i += W) { const vf v = ld_x(x, r, xo, i); acc[0] += v * v; }
    for (int u = 1; u < U; ++u) acc[0] += acc[u];
    float ss = hsum(acc[0]);
    for (; i < C; ++i) { const float v = ld1_x(x, r, xo, i); ss += v * v; }
    const float rs = 1.0f / sqrtf(ss / (float)C + EPS);
    a->rstd[n] = rs;
    const io_t* xs = xo ? (const io_t*)xo : x;
    const vf rv = splat(rs);
    for (i = 0; i < CW; i += W) st_out(o + i, ld_io(xs + i) * rv * ld_f32(w + i));
    for (; i < C; ++i) st1_out(o + i, ld1_io(xs + i) * rs * w[i]);
  }
}

// dx = rs * g - k * x with g = dout * w and k = rs^3 * sum(g * x) / C, the same as
// rs * (g - xhat * mean(g * xhat)) with xhat = x * rs; dw += dout * x * rs.
LMC_EXPORT void lmcore_rmsnorm_backward(const lmcore_rmsnorm_backward_args* a) {
  const float* w = a->weight;
  float* dw = a->dweight;
  for (int64_t n = a->row_begin; n < a->row_end; ++n) {
    const io_t* x = (const io_t*)a->inp + n * C;
    const out_t* d = (const out_t*)a->dout + n * C;
    io_t* dx = (io_t*)a->dinp + n * C;
    const float rs = a->rstd[n];
    vf acc[U];
    for (int u = 0; u < U; ++u) acc[u] = splat(0);
    int64_t i = 0;
    // Pass 1 also prefetches the row of dx, one touch per cache line, so that its lines arrive while
    // the dot product streams d and x instead of stalling pass 2, which reads and writes them (4096 x
    // 4096 f32, 2 threads, Zen 5: the backward 5.3 -> 4.5 ms).
    for (; i < CU; i += W * U)
      for (int u = 0; u < U; ++u) {
        const int64_t j = i + u * W;
        if (((j * (int64_t)sizeof(io_t)) & 63) == 0) __builtin_prefetch(dx + j, 1, 3);
        acc[u] += ld_out(d + j) * ld_f32(w + j) * ld_io(x + j);
      }
    for (; i < CW; i += W) {
      if (((i * (int64_t)sizeof(io_t)) & 63) == 0) __builtin_prefetch(dx + i, 1, 3);
      acc[0] += ld_out(d + i) * ld_f32(w + i) * ld_io(x + i);
    }
    for (int u = 1; u < U; ++u) acc[0] += acc[u];
    float dot = hsum(acc[0]);
    for (; i < C; ++i) dot += ld1_out(d + i) * w[i] * ld1_io(x + i);
    const float k = rs * rs * rs * dot / (float)C;
    const vf rv = splat(rs), kv = splat(k);
    for (i = 0; i < CW; i += W) {
      const vf dv = ld_out(d + i), xv = ld_io(x + i);
      st_io(dx + i, ld_io(dx + i) + rv * dv * ld_f32(w + i) - kv * xv);
      st_f32(dw + i, ld_f32(dw + i) + dv * xv * rv);
    }
    for (; i < C; ++i) {
      const float dv = ld1_out(d + i), xv = ld1_io(x + i);
      st1_io(dx + i, ld1_io(dx + i) + rs * dv * w[i] - k * xv);
      dw[i] += dv * xv * rs;
    }
  }
}
)";
  return g;
}

}  // namespace lmcore::codegen

// ---- GEMM with a fused epilogue ----

namespace lmcore::codegen {

const char* act_name(Act a) {
  switch (a) {
    case Act::none: return "none";
    case Act::silu: return "silu";
    case Act::gelu: return "gelu";
    case Act::swiglu: return "swiglu";
    case Act::dswiglu: return "dswiglu";
  }
  return "?";
}

std::string GemmSpec::to_string() const {
  return fmt::format("gemm N={} K={} bt={} bias={} act={} res={} pre={}", N, K, b_trans ? 1 : 0, bias ? 1 : 0,
                     act_name(act), residual ? 1 : 0, store_pre ? 1 : 0);
}

std::string GemmVariant::to_string() const {
  if (core == blas) return fmt::format("blas {}x{}", tile_m, tile_n);
  return fmt::format("micro {}x{} W={} MC={} KC={}", micro_m, micro_nv, vector_floats, block_m, block_k);
}

GemmVariant GemmVariant::parse(const std::string& s) {
  GemmVariant v;
  int a = 0, b = 0, w = 0, mc = 0, kc = 0, used = 0;
  if (std::sscanf(s.c_str(), "blas %dx%d%n", &a, &b, &used) == 2 && used == static_cast<int>(s.size())) {
    v.core = blas;
    v.tile_m = a;
    v.tile_n = b;
  } else if (std::sscanf(s.c_str(), "micro %dx%d W=%d MC=%d KC=%d%n", &a, &b, &w, &mc, &kc, &used) == 5 &&
             used == static_cast<int>(s.size())) {
    v.core = micro;
    v.micro_m = a;
    v.micro_nv = b;
    v.vector_floats = w;
    v.block_m = mc;
    v.block_k = kc;
  } else {
    fail("codegen gemm: cannot parse the variant '{}', expected 'blas MxN' or 'micro MRxNV W=L MC=R KC=K'", s);
  }
  return v;
}

namespace {

// exp in W lanes: x = n ln2 + r, |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (error < 2e-7
// relative on that range, about 2 ulp), 2^n through the exponent bits. Inputs are clamped to
// [-87, 88] so that 2^n stays a normal float; silu and gelu only need exp to saturate there.
const char* kEpilogueHelpers = R"(
typedef int32_t vi __attribute__((vector_size(W * 4)));
static inline vf vexp(vf x) {
  const vf lo = splat(-87.0f), hi = splat(88.0f);
  x = (vf)(((vi)(x < lo) & (vi)lo) | (~(vi)(x < lo) & (vi)x));
  x = (vf)(((vi)(x > hi) & (vi)hi) | (~(vi)(x > hi) & (vi)x));
  const vf magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const vf n = (x * 1.44269504088896341f + magic) - magic;
  const vf r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  vf p = splat(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  return p * (vf)e;
}
// 1 / x for x >= 1 (every use here): the CPU's reciprocal estimate refined by Newton steps, within ~1
// ulp; a vector division has a throughput of ~16 cycles per 16 lanes, which made the epilogue, not the
// memory traffic, what a fused tile waited on.
static inline vf vrcp(vf x) {
#if W == 16 && defined(__AVX512F__)
  const vf r = (vf)_mm512_rcp14_ps((__m512)x);  // 2^-14 relative
  return r * (2.0f - x * r);
#elif W == 8 && defined(__AVX__)
  vf r = (vf)_mm256_rcp_ps((__m256)x);  // 1.5 * 2^-12 relative
  r = r * (2.0f - x * r);
  return r * (2.0f - x * r);
#else
  return 1.0f / x;
#endif
}
// A store that bypasses the caches (whole 64-byte lines only): for the stored product P, which the
// backward reads long after; a regular store would first read each line from memory (write-allocate)
// and push the tiles the kernel still needs out of the caches. Callers end with sfence_nt().
static inline void st_nt(float* p, vf v) {
#if W == 16 && defined(__AVX512F__)
  if (((uintptr_t)p & 63) == 0) { _mm512_stream_ps(p, (__m512)v); return; }
#endif
  st_f32(p, v);
}
static inline void sfence_nt(void) {
#if W == 16 && defined(__AVX512F__)
  _mm_sfence();  // the streaming stores are visible to other threads once the kernel returns
#endif
}
static inline vf vsilu(vf x) { return x * vrcp(1.0f + vexp(-x)); }
static inline vf vgelu(vf x) {
  // 0.5 x (1 + tanh(u)) = x - x / (1 + e^(2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
  const vf u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x - x * vrcp(1.0f + vexp(2.0f * u));
}
static inline vf vsigmoid(vf x) { return vrcp(1.0f + vexp(-x)); }
static inline float silu1(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid1(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float gelu1(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
)";

}  // namespace

GeneratedSource generate_gemm(const GemmSpec& spec, const GemmVariant& v) {
  LMCORE_CHECK(spec.N >= 1 && spec.K >= 1, "codegen gemm: N and K must be >= 1, found N={} K={}", spec.N, spec.K);
  LMCORE_CHECK(spec.act != Act::dswiglu || (!spec.bias && !spec.residual && !spec.store_pre),
               "codegen gemm: act=dswiglu takes no bias, residual or stored product, found {}", spec.to_string());
  if (v.core == GemmVariant::blas)
    LMCORE_CHECK(v.tile_m >= 1 && v.tile_n >= 1, "codegen gemm: tile sizes must be >= 1, found {}", v.to_string());
  else
    LMCORE_CHECK(v.micro_m >= 1 && v.micro_m <= 16 && v.micro_nv >= 1 && v.micro_nv <= 4 &&
                     v.block_m >= v.micro_m && v.block_m % v.micro_m == 0 && v.block_k >= 0 &&
                     (v.vector_floats == 4 || v.vector_floats == 8 || v.vector_floats == 16),
                 "codegen gemm: micro_m must be in [1, 16], micro_nv in [1, 4], block_m a positive multiple of "
                 "micro_m, block_k >= 0 and vector_floats 4, 8 or 16, found {}",
                 v.to_string());
  GeneratedSource g;
  g.kind = "gemm";
  g.spec = spec.to_string();
  g.variant = v.to_string();
  std::string& s = g.source;
  s += "// Generated by lmcore codegen: " + g.spec + ", " + g.variant + "\n";
  s += kernel_abi_text();
  s += "\n#include <string.h>\n#include <math.h>\n#if defined(__x86_64__)\n#include <immintrin.h>\n#endif\n\n";
  s += "#define LMC_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n";
  s += fmt::format("#define W {}\n", v.core == GemmVariant::micro ? v.vector_floats : native_vector_floats());
  s += fmt::format(
      "static const int64_t N = {}, K = {}, NB = {};\n"
      "#define BT {}\n#define BIAS {}\n#define ACT {}\n#define RES {}\n#define PRE {}\n#define SWIGLU {}\n"
      "#define DSWIGLU {}\n",
      spec.N, spec.K, spec.nb(), spec.b_trans ? 1 : 0, spec.bias ? 1 : 0, static_cast<int>(spec.act),
      spec.residual ? 1 : 0, spec.store_pre ? 1 : 0, spec.act == Act::swiglu ? 1 : 0,
      spec.act == Act::dswiglu ? 1 : 0);
  s += kVectorHelpers;
  s += kEpilogueHelpers;
  s += "LMC_EXPORT int lmcore_kernel_abi_version(void) { return LMCORE_KERNEL_ABI_VERSION; }\n";
  s += "LMC_EXPORT const char* lmcore_kernel_spec(void) { return \"" + g.spec + "\"; }\n";
  // The epilogue of one row segment: g = gate (or the whole product), u = up (swiglu), columns
  // [n0, n0 + cols) of row m. Vectors of W, then a scalar tail.
  s += R"(
static inline vf act_v(vf g, vf u) {
#if ACT == 1
  (void)u; return vsilu(g);
#elif ACT == 2
  (void)u; return vgelu(g);
#elif ACT == 3
  return vsilu(g) * u;
#else
  (void)u; return g;
#endif
}
static inline float act_1(float g, float u) {
#if ACT == 1
  (void)u; return silu1(g);
#elif ACT == 2
  (void)u; return gelu1(g);
#elif ACT == 3
  return silu1(g) * u;
#else
  (void)u; return g;
#endif
}
#if DSWIGLU
// The SwiGLU backward: d holds dA of columns [n0, n0 + cols); gate and up come from aux.
static void epilogue_row(const lmcore_gemm_args* a, int64_t m, int64_t n0, int64_t cols, const float* d,
                         const float*, int) {
  const float* gg = a->aux + m * a->ldx + n0;
  const float* uu = gg + N;
  float* dg = a->c + m * a->ldc + n0;
  float* du = dg + N;
  int64_t j = 0;
  for (; j + W <= cols; j += W) {
    const vf dv = ld_f32(d + j), gv = ld_f32(gg + j), uv = ld_f32(uu + j);
    const vf s = vsigmoid(gv);
    st_f32(dg + j, dv * uv * (s * (1.0f + gv * (1.0f - s))));
    st_f32(du + j, dv * (gv * s));
  }
  for (; j < cols; ++j) {
    const float s = sigmoid1(gg[j]);
    dg[j] = d[j] * uu[j] * (s * (1.0f + gg[j] * (1.0f - s)));
    du[j] = d[j] * (gg[j] * s);
  }
}
#else
// store_pre: P goes to pre here (0: the product was written there in place).
static void epilogue_row(const lmcore_gemm_args* a, int64_t m, int64_t n0, int64_t cols, const float* g,
                         const float* u, int store_pre) {
  float* c = a->c + m * a->ldc + n0;
  const float* res = RES ? a->residual + m * a->ldr + n0 : 0;
  float* pre = PRE && store_pre ? a->pre + m * a->ldp + n0 : 0;
  const float* bias = BIAS ? a->bias + n0 : 0;
  int64_t j = 0;
  for (; j + W <= cols; j += W) {
    vf gv = ld_f32(g + j), uv = splat(0);
    if (SWIGLU) uv = ld_f32(u + j);
    if (BIAS) { gv += ld_f32(bias + j); if (SWIGLU) uv += ld_f32(bias + N + j); }
    if (PRE && store_pre) { st_nt(pre + j, gv); if (SWIGLU) st_nt(pre + N + j, uv); }
    vf y = act_v(gv, uv);
    if (RES) y += ld_f32(res + j);
    st_f32(c + j, y);
  }
  for (; j < cols; ++j) {
    float gv = g[j], uv = SWIGLU ? u[j] : 0.0f;
    if (BIAS) { gv += bias[j]; if (SWIGLU) uv += bias[N + j]; }
    if (PRE && store_pre) { pre[j] = gv; if (SWIGLU) pre[N + j] = uv; }
    float y = act_1(gv, uv);
    if (RES) y += res[j];
    c[j] = y;
  }
}
#endif
)";
  if (v.core == GemmVariant::blas) {
    s += fmt::format("#define TM {}\n#define TN {}\n", v.tile_m, v.tile_n);
    s += R"(
// The "blas" core: for each TM x TN output tile, sgemm writes the product (gate and up halves for
// swiglu) to a tile buffer, or, when P is stored without a bias, straight into pre; the epilogue reads
// it back while it is still in L1/L2 (P + bias goes to pre from there). For swiglu at full width the
// gate and up columns, adjacent in B, are one product of 2N columns, whose C is dense (oneDNN takes
// its slower jit sgemm for a strided C, e.g. the gate half of a [gate | up] row).
static inline const float* bcol(const lmcore_gemm_args* a, int64_t n) { return BT ? a->b + n * a->ldb : a->b + n; }
static const int64_t TNE = TN < N ? TN : N;
// A plain product (no bias, activation, residual or stored P): sgemm writes C itself, no epilogue pass.
#define PLAIN (ACT == 0 && !BIAS && !RES && !PRE)
#define IN_PLACE (PRE && !BIAS)
LMC_EXPORT int64_t lmcore_gemm_scratch_floats(void) { return PLAIN || IN_PLACE ? 0 : TM * TNE * (SWIGLU ? 2 : 1); }
LMC_EXPORT int64_t lmcore_gemm_packed_panels(void) { return 0; }
LMC_EXPORT int64_t lmcore_gemm_packed_floats(void) { return 0; }
LMC_EXPORT void lmcore_gemm_pack_b(const lmcore_gemm_args*, float*, int64_t, int64_t) {}
LMC_EXPORT void lmcore_gemm_epilogue(const lmcore_gemm_args* a) {
  const int64_t tn = TNE;
  float* buf = a->scratch;
  for (int64_t m0 = a->row_begin; m0 < a->row_end; m0 += TM) {
    const int64_t mr = a->row_end - m0 < TM ? a->row_end - m0 : TM;
    for (int64_t n0 = 0; n0 < N; n0 += tn) {
      const int64_t nc = N - n0 < tn ? N - n0 : tn;
      if (PLAIN) {
        a->sgemm(BT, mr, nc, K, a->a + m0 * a->lda, a->lda, bcol(a, n0), a->ldb, a->c + m0 * a->ldc + n0, a->ldc);
        continue;
      }
      float* g; float* u = 0; int64_t ldt;
      if (IN_PLACE) { g = a->pre + m0 * a->ldp + n0; ldt = a->ldp; }
      else { g = buf; ldt = SWIGLU && nc == N ? 2 * N : nc; }
      if (SWIGLU && nc == N) {  // rows of [gate | up], one product
        u = g + N;
        a->sgemm(BT, mr, 2 * N, K, a->a + m0 * a->lda, a->lda, bcol(a, 0), a->ldb, g, ldt);
      } else {
        a->sgemm(BT, mr, nc, K, a->a + m0 * a->lda, a->lda, bcol(a, n0), a->ldb, g, ldt);
        if (SWIGLU) {
          u = IN_PLACE ? g + N : g + mr * nc;
          a->sgemm(BT, mr, nc, K, a->a + m0 * a->lda, a->lda, bcol(a, N + n0), a->ldb, u, ldt);
        }
      }
      for (int64_t i = 0; i < mr; ++i) epilogue_row(a, m0 + i, n0, nc, g + i * ldt, SWIGLU ? u + i * ldt : 0, !IN_PLACE);
    }
  }
  sfence_nt();
}
)";
  } else {
    s += fmt::format("#define MR {}\n#define NV {}\n#define MC {}\nstatic const int64_t KC = {};\n", v.micro_m,
                     v.micro_nv, v.block_m, v.block_k > 0 && v.block_k < spec.K ? v.block_k : spec.K);
    s += R"(
// The "micro" core. B is packed once per product by the caller's threads (lmcore_gemm_pack_b) into
// panels of NR = NV x W columns, K rows each (zero past N; for swiglu the gate panels, then the up
// panels), so no thread packs it again. Each block of MC rows of A is packed into MR-row strips
// (k-major: MR values per k). For each panel, in passes of KC over K (the KC x NR sliver of B in L1),
// every strip runs the register-blocked micro-kernel: MR x NV accumulators, NV loads of B and MR
// broadcasts of A per k (MR x NV FMAs), adding into the block's MC x NR tile buffer (L1/L2); after the
// last pass the tiles go through the epilogue, so C is written once.
#define NR (NV * W)
static const int64_t NPAN = (N + NR - 1) / NR;
static const int64_t PANELS = SWIGLU ? 2 * NPAN : NPAN;
LMC_EXPORT int64_t lmcore_gemm_packed_panels(void) { return PANELS; }
LMC_EXPORT int64_t lmcore_gemm_packed_floats(void) { return PANELS * K * NR; }
// The packed A block, then the tiles; the caller's scratch is 64-byte aligned, and so are the tiles
// (a zmm load or store across two cache lines costs two).
static const int64_t PA_FLOATS = (MC * K + 15) / 16 * 16;
LMC_EXPORT int64_t lmcore_gemm_scratch_floats(void) { return PA_FLOATS + 2 * MC * NR; }
LMC_EXPORT void lmcore_gemm_pack_b(const lmcore_gemm_args* a, float* packed, int64_t q0, int64_t q1) {
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t p = q % NPAN, c0 = p * NR + (q >= NPAN ? N : 0);
    const int64_t cols = N - p * NR < NR ? N - p * NR : NR;
    float* d = packed + q * K * NR;
#if BT
    // Rows of B are columns here: transpose in blocks of 16 k, so that reads and writes stay in a few lines.
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      const int64_t kn = K - k0 < 16 ? K - k0 : 16;
      for (int64_t j = 0; j < NR; ++j) {
        const float* src = a->b + (c0 + j) * a->ldb + k0;
        for (int64_t k = 0; k < kn; ++k) d[(k0 + k) * NR + j] = j < cols ? src[k] : 0.0f;
      }
    }
#else
    for (int64_t k = 0; k < K; ++k) {
      const float* src = a->b + k * a->ldb + c0;
      for (int64_t j = 0; j < NR; ++j) d[k * NR + j] = j < cols ? src[j] : 0.0f;
    }
#endif
  }
}
// A block: for each pass of KC (kc = the pass's length) the strips of MR rows, k-major within a strip,
// at pa + k0 * MC + i0 * kc.
static void pack_a(const lmcore_gemm_args* a, float* pa, int64_t m0, int64_t mc) {
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = K - k0 < KC ? K - k0 : KC;
    for (int64_t i0 = 0; i0 < mc; i0 += MR)
      for (int i = 0; i < MR; ++i) {
        float* d = pa + k0 * MC + i0 * kc + i;
        if (i0 + i < mc) {
          const float* src = a->a + (m0 + i0 + i) * a->lda + k0;
          for (int64_t k = 0; k < kc; ++k) d[k * MR] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) d[k * MR] = 0.0f;
        }
      }
  }
}
// t (MR x NR, row stride NR) = [t +] pa (kc x MR) x pb (kc x NR). The next rows of both are prefetched
// 16 k ahead (the B sliver may come from L2).
static inline void micro(const float* __restrict pa, const float* __restrict pb, int64_t kc, float* __restrict t,
                         int first) {
  vf acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = first ? splat(0.0f) : ld_f32(t + i * NR + v * W);
  for (int64_t k = 0; k < kc; ++k) {
    __builtin_prefetch(pb + (k + 16) * NR);
    __builtin_prefetch(pa + (k + 16) * MR);
    vf b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = ld_f32(pb + k * NR + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const vf av = splat(pa[k * MR + i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += av * b[v];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) st_f32(t + i * NR + v * W, acc[i][v]);
}
LMC_EXPORT void lmcore_gemm_epilogue(const lmcore_gemm_args* a) {
  float* pa = a->scratch;
  float* tg = pa + PA_FLOATS;  // MC x NR tiles of the block (gate, or the whole product)
  float* tu = tg + MC * NR; // up tiles (swiglu)
  for (int64_t m0 = a->row_begin; m0 < a->row_end; m0 += MC) {
    const int64_t mc = a->row_end - m0 < MC ? a->row_end - m0 : MC;
    pack_a(a, pa, m0, mc);
    for (int64_t p = 0; p < NPAN; ++p) {
      const int64_t n0 = p * NR, cols = N - n0 < NR ? N - n0 : NR;
      const float* pg = a->packed_b + p * K * NR;
      const float* pu = SWIGLU ? a->packed_b + (NPAN + p) * K * NR : pg;
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = K - k0 < KC ? K - k0 : KC;
        // The gate sliver, then the up sliver: one sliver at a time in L1 (two would fill it).
        for (int64_t i0 = 0; i0 < mc; i0 += MR) micro(pa + k0 * MC + i0 * kc, pg + k0 * NR, kc, tg + i0 * NR, k0 == 0);
        if (SWIGLU)
          for (int64_t i0 = 0; i0 < mc; i0 += MR) micro(pa + k0 * MC + i0 * kc, pu + k0 * NR, kc, tu + i0 * NR, k0 == 0);
      }
      for (int64_t i = 0; i < mc; ++i) epilogue_row(a, m0 + i, n0, cols, tg + i * NR, tu + i * NR, 1);
    }
  }
  sfence_nt();
}
)";
  }
  return g;
}

}  // namespace lmcore::codegen
