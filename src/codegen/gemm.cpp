// GemmKernel: tuning (candidates compiled in parallel, timed in forked children), the generic kernel,
// and the row split over threads.
#include "lmcore/codegen/gemm.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/generator.h"
#include "lmcore/codegen/runtime.h"
#include "lmcore/core/error.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "sha256.h"

namespace lmcore::codegen {

namespace {

void check_spec(const GemmSpec& s) { detail::check_gemm_spec(s); }

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float gelu(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

std::int64_t pow2_bucket(std::int64_t m) {
  std::int64_t b = 1;
  while (b < m && b < (std::int64_t{1} << 40)) b *= 2;
  return b;
}

}  // namespace

namespace {

GemmVariant micro_variant(int mr, int nv, int mc, int kc, int w) {
  GemmVariant v;
  v.core = GemmVariant::micro;
  v.micro_m = mr;
  v.micro_nv = nv;
  v.block_m = mc;
  v.block_k = kc;
  v.vector_floats = w;
  return v;
}

}  // namespace

// The micro core with B packed once: 24 accumulators of 32 vector registers (AVX-512), 12 of 16 (AVX2).
GemmVariant default_gemm_variant() {
  const int w = native_vector_floats();
  return w == 16 ? micro_variant(12, 2, 96, 192, w) : micro_variant(6, 2, 96, 256, w);
}

std::vector<GemmVariant> gemm_candidates(const GemmSpec& spec) {
  std::vector<GemmVariant> c;
  // Register blocks that fill the register file (MR x NV accumulators + NV of B + 1 of A): with 32
  // registers (AVX-512) 12x2, 14x2 and 8x3; with 16 (AVX2 or less) 6x2 and 4x3. KC: a B sliver of
  // KC x NR floats in half of a 48 KiB L1 (192 x 32, 128 x 48), or all of K in one pass.
  // Each with a small block of A rows (MC, the sliver reused by MC / MR strips) and a large one: the
  // most rows whose packed block fits in 1 MiB of the L2, so that B (several MiB, from the L3) is
  // streamed once per MC rows; at the trainer's shapes the large block is 2-4x faster to feed.
  const int w = native_vector_floats();
  auto large = [&](int mr) {
    const std::int64_t rows = (std::int64_t{1} << 18) / std::max<std::int64_t>(1, spec.K) / mr * mr;
    return static_cast<int>(std::clamp<std::int64_t>(rows, mr, 1024 / mr * mr));
  };
  if (w == 16) {
    for (auto [mr, nv, mc, kc] : {std::tuple{12, 2, 96, 192}, std::tuple{14, 2, 112, 192}, std::tuple{8, 3, 64, 128}}) {
      c.push_back(micro_variant(mr, nv, mc, kc, w));
      c.push_back(micro_variant(mr, nv, large(mr), kc, w));
    }
  } else {
    for (auto [mr, nv, mc, kc] : {std::tuple{6, 2, 96, 256}, std::tuple{4, 3, 64, 256}}) {
      c.push_back(micro_variant(mr, nv, mc, kc, w));
      c.push_back(micro_variant(mr, nv, large(mr), kc, w));
    }
  }
  // OpenBLAS per tile (it re-packs B per call): full-width tiles of 128 rows, and of 1024 rows, which
  // is one sgemm per thread's row block at the trainer's sizes (OpenBLAS's own speed, the epilogue then
  // reading the block back from L2/L3: the unfused pair inside one kernel, as Inductor keeps the
  // library GEMM among its candidates).
  for (int tm : {128, 1024}) {
    GemmVariant v;
    v.tile_m = tm;
    v.tile_n = static_cast<int>(std::min<std::int64_t>(1 << 20, spec.N));
    c.push_back(v);
  }
  // Duplicates (tile_n clamped to a small N) would be compiled and timed twice.
  std::vector<GemmVariant> out;
  for (const auto& v : c)
    if (std::none_of(out.begin(), out.end(), [&](const GemmVariant& o) { return o.to_string() == v.to_string(); }))
      out.push_back(v);
  return out;
}

namespace detail {

void check_gemm_spec(const GemmSpec& s) {
  LMCORE_CHECK(s.N >= 1 && s.K >= 1, "codegen gemm: N and K must be >= 1, found N={} K={}", s.N, s.K);
  LMCORE_CHECK(s.act != Act::dswiglu || (!s.bias && !s.residual && !s.store_pre),
               "codegen gemm: act=dswiglu takes no bias, residual or stored product, found {}", s.to_string());
}

void sgemm_callback(int b_trans, std::int64_t M, std::int64_t N, std::int64_t K, const float* a, std::int64_t lda,
                    const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  gemm_f32(false, b_trans != 0, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

// The generic kernel: blocks of 32 rows, the whole product of a block into a scratch buffer, then the
// epilogue over it (still in cache for the model's sizes).
constexpr std::int64_t kGenericRows = 32;

std::int64_t generic_gemm_scratch_floats(const GemmSpec& s) { return kGenericRows * s.nb(); }

void generic_gemm(const GemmSpec& s, const lmcore_gemm_args& a) {
  const std::int64_t N = s.N, NB = s.nb(), K = s.K;
  constexpr std::int64_t kRows = kGenericRows;
  for (std::int64_t m0 = a.row_begin; m0 < a.row_end; m0 += kRows) {
    const std::int64_t mr = std::min(kRows, a.row_end - m0);
    float* p = s.store_pre ? a.pre + m0 * a.ldp : a.scratch;
    const std::int64_t ldp = s.store_pre ? a.ldp : NB;
    gemm_f32(false, s.b_trans, mr, NB, K, 1.0f, a.a + m0 * a.lda, a.lda, a.b, a.ldb, 0.0f, p, ldp);
    for (std::int64_t i = 0; i < mr; ++i) {
      float* pr = p + i * ldp;
      float* cr = a.c + (m0 + i) * a.ldc;
      if (s.act == Act::dswiglu) {
        const float* gr = a.aux + (m0 + i) * a.ldx;
        for (std::int64_t j = 0; j < N; ++j) {
          const float g = gr[j], u = gr[N + j], sg = 1.0f / (1.0f + std::exp(-g));
          cr[j] = pr[j] * u * (sg * (1.0f + g * (1.0f - sg)));
          cr[N + j] = pr[j] * (g * sg);
        }
        continue;
      }
      const float* rr = s.residual ? a.residual + (m0 + i) * a.ldr : nullptr;
      if (s.bias)
        for (std::int64_t j = 0; j < NB; ++j) pr[j] += a.bias[j];
      for (std::int64_t j = 0; j < N; ++j) {
        float y = pr[j];
        switch (s.act) {
          case Act::none: break;
          case Act::silu: y = silu(y); break;
          case Act::gelu: y = gelu(y); break;
          case Act::swiglu: y = silu(y) * pr[N + j]; break;
          case Act::dswiglu: break;  // handled above
        }
        cr[j] = rr ? y + rr[j] : y;
      }
    }
  }
}

}  // namespace detail

int time_candidates_in_children(std::size_t n, const std::function<double(std::size_t)>& time_one,
                                double timeout_seconds, std::vector<double>* seconds) {
  std::vector<double> t(n, INFINITY);
  for (std::size_t i = 0; i < n; ++i) {
    int fds[2];
    if (::pipe(fds) != 0) continue;
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      continue;
    }
    if (pid == 0) {
      ::close(fds[0]);
      double r = -1;
      try {
        r = time_one(i);
      } catch (...) {
        ::_exit(3);
      }
      const ssize_t w = ::write(fds[1], &r, sizeof r);
      ::_exit(w == sizeof r ? 0 : 4);
    }
    ::close(fds[1]);
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    bool done = false;
    while (!done) {
      const pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid) break;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_seconds) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        done = true;
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    double r = -1;
    if (status == 0 && ::read(fds[0], &r, sizeof r) == sizeof r && r > 0) t[i] = r;
    ::close(fds[0]);
  }
  int best = -1;
  for (std::size_t i = 0; i < n; ++i)
    if (std::isfinite(t[i]) && (best < 0 || t[i] < t[static_cast<std::size_t>(best)])) best = static_cast<int>(i);
  if (seconds) *seconds = t;
  return best;
}

namespace {

// Floats on 64-byte boundaries (whole cache lines: a zmm load that straddles two lines costs two, and
// malloc's large blocks start 16 bytes past a page), kept by a thread between calls so that the pages
// are not faulted in again every time.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats() { std::free(p_); }
  float* get(std::int64_t n) {
    if (n > n_) {
      std::free(p_);
      const std::size_t bytes = (static_cast<std::size_t>(n) * 4 + 63) / 64 * 64;
      p_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      LMCORE_CHECK(p_ != nullptr, "codegen gemm: cannot allocate {} bytes of working memory", bytes);
      n_ = n;
    }
    return p_;
  }

 private:
  float* p_ = nullptr;
  std::int64_t n_ = 0;
};

// What run() needs of a loaded kernel (fn null: the generic kernel).
struct Entry {
  lmcore_gemm_fn fn = nullptr;
  lmcore_gemm_pack_b_fn pack_b = nullptr;
  std::int64_t scratch_floats = 0, packed_panels = 0, packed_floats = 0;
};

// The product over M rows on lmcore's pool: 1. B packed once into a buffer of the calling thread (kept
// between calls), the panels split over the threads; 2. the row blocks, each on every panel of the
// shared copy. Block boundaries on multiples of 16 rows (whole tiles of every variant's row blocking).
void run_parallel(const GemmSpec& s, const Entry& e, const GemmOperands& o, std::int64_t M) {
  const std::int64_t threads = in_parallel_region() ? 1 : num_threads();
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, M / 16));
  const BlasSingleThreaded guard;
  // (A thread_local is not captured: the workers see the pointer.)
  thread_local AlignedFloats packed;
  float* const packed_b = e.fn && e.packed_panels > 0 ? packed.get(e.packed_floats) : nullptr;
  if (packed_b) {
    const lmcore_gemm_args pa{o.a, o.b, o.c, o.pre, o.bias, o.residual, detail::sgemm_callback, nullptr, packed_b,
                              o.aux, o.lda, o.ldb, o.ldc, o.ldp, o.ldr, o.ldx, 0, M};
    parallel_for(0, e.packed_panels, 1, [&](std::int64_t q0, std::int64_t q1) { e.pack_b(&pa, packed_b, q0, q1); });
  }
  parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t lo = (M * p / parts) / 16 * 16;
      const std::int64_t hi = p + 1 == parts ? M : (M * (p + 1) / parts) / 16 * 16;
      if (hi <= lo) continue;
      thread_local AlignedFloats scratch;
      const lmcore_gemm_args args{o.a,   o.b,   o.c,   o.pre, o.bias, o.residual, detail::sgemm_callback,
                                  scratch.get(e.scratch_floats), packed_b, o.aux, o.lda, o.ldb, o.ldc, o.ldp, o.ldr,
                                  o.ldx, lo, hi};
      if (e.fn) e.fn(&args);
      else detail::generic_gemm(s, args);
    }
  });
}

// Seconds per product of M rows of random operands, run as run() runs it (B packed by the threads,
// then the row blocks on every thread of the pool): best of 5 after a warm-up. All threads: a core
// that wins alone may lose when both cores share the L3 and the memory bandwidth.
double time_gemm(const GemmSpec& s, const LoadedKernel& lib, std::int64_t M) {
  Entry e;
  e.fn = reinterpret_cast<lmcore_gemm_fn>(lib.symbol("lmcore_gemm_epilogue"));
  e.pack_b = reinterpret_cast<lmcore_gemm_pack_b_fn>(lib.symbol("lmcore_gemm_pack_b"));
  auto sz = reinterpret_cast<lmcore_gemm_scratch_floats_fn>(lib.symbol("lmcore_gemm_scratch_floats"));
  auto panels = reinterpret_cast<lmcore_gemm_scratch_floats_fn>(lib.symbol("lmcore_gemm_packed_panels"));
  auto packed_floats = reinterpret_cast<lmcore_gemm_scratch_floats_fn>(lib.symbol("lmcore_gemm_packed_floats"));
  if (!e.fn || !sz || !panels || !packed_floats || !e.pack_b) return -1.0;
  e.scratch_floats = sz();
  e.packed_panels = panels();
  e.packed_floats = packed_floats();
  const std::int64_t N = s.N, NB = s.nb(), K = s.K, NC = s.out_cols();
  // Operands on 64-byte boundaries, as the trainer's arena and parameters are.
  AlignedFloats a, b, c, pre, bias, res, aux;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  auto random = [&](AlignedFloats& v, std::int64_t n) {
    float* p = v.get(n);
    for (std::int64_t i = 0; i < n; ++i) p[i] = d(rng);
    return p;
  };
  const GemmOperands ops{random(a, M * K), K,     random(b, NB * K),  s.b_trans ? K : NB, c.get(M * NC),
                         NC,               pre.get(M * NB), NB, random(bias, NB), random(res, M * N),
                         N,                random(aux, M * 2 * N), 2 * N};
  run_parallel(s, e, ops, M);
  // Before each timed call the caches are flushed by writing a buffer larger than L2 + a slice of L3
  // on every thread (as Triton's do_bench clears the L2): in a training step the weight and the
  // operands of a product come from memory, and a variant that only wins with B and A already in
  // cache from the previous repetition measured ~20% faster alone than inside the trainer.
  AlignedFloats flush;
  const std::int64_t flush_floats = std::int64_t{16} << 20;  // 64 MiB
  float* const fl = flush.get(flush_floats);
  double best = INFINITY;
  for (int r = 0; r < 5; ++r) {
    parallel_for(0, flush_floats, 1 << 16, [&](std::int64_t i0, std::int64_t i1) {
      std::memset(fl + i0, r, static_cast<std::size_t>(i1 - i0) * 4);
    });
    const auto t0 = std::chrono::steady_clock::now();
    run_parallel(s, e, ops, M);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// The variant for `spec` at M rows: the tuning record, or a tuning run that writes one.
GemmVariant tuned_variant(const GemmSpec& spec, std::int64_t M, const Options& o) {
  std::string why;
  const auto cc = detail::cached_compiler(o, &why);
  if (!cc) return default_gemm_variant();  // load_kernel will say why
  const std::int64_t bucket = pow2_bucket(M);
  const auto cands = gemm_candidates(spec);
  std::vector<GeneratedSource> sources;
  for (const auto& v : cands) sources.push_back(generate_gemm(spec, v));
  // The candidates' sources are in the key (a changed template or candidate list is tuned again), and
  // the thread count (candidates are timed on every thread of the pool).
  std::string all_sources;
  for (const auto& g : sources) all_sources += g.source;
  const std::string tune_key =
      detail::sha256_hex(fmt::format("gemm-tune 4 abi {}\n{}\nM={} threads={}\n{} {}\n{}\n{}\n{}",
                                     LMCORE_KERNEL_ABI_VERSION, spec.to_string(), bucket, num_threads(), cc->path, cc->version, cc->flags_string(),
                                     detail::cpu_features(), detail::sha256_hex(all_sources)))
          .substr(0, 40);
  KernelCache cache(o.cache_dir, o.cache_max_bytes);
  if (auto rec = cache.read_tuning(tune_key)) {
    try {
      return GemmVariant::parse(rec->substr(0, rec->find(';')));
    } catch (const Error&) {
      // An unreadable record is tuned again below.
    }
  }
  const auto loaded = load_kernels(sources, o);
  // The product as the caller runs it, on every thread (at most 4096 rows, for a quick tuning).
  const std::int64_t rows = std::clamp<std::int64_t>(M, 16, 4096);
  // Three rounds over all candidates, each candidate's best kept: on a shared machine a disturbance
  // then spoils one sample of a candidate, not its figure.
  std::vector<double> secs(cands.size(), INFINITY);
  for (int round = 0; round < 3; ++round) {
    std::vector<double> r;
    time_candidates_in_children(
        cands.size(),
        [&](std::size_t i) { return time_gemm(spec, loaded[i], rows); },
        30.0, &r);
    for (std::size_t i = 0; i < cands.size(); ++i) secs[i] = std::min(secs[i], r[i]);
  }
  int best = -1;
  for (std::size_t i = 0; i < cands.size(); ++i)
    if (std::isfinite(secs[i]) && (best < 0 || secs[i] < secs[static_cast<std::size_t>(best)])) best = static_cast<int>(i);
  if (best < 0) return default_gemm_variant();
  std::string record = cands[static_cast<std::size_t>(best)].to_string() + ";";
  for (std::size_t i = 0; i < cands.size(); ++i)
    record += fmt::format(" {}={:.1f}us", cands[i].to_string(), std::isfinite(secs[i]) ? secs[i] * 1e6 : -1.0);
  cache.write_tuning(tune_key, record);
  return cands[static_cast<std::size_t>(best)];
}

}  // namespace

GemmVariant gemm_variant_for(const GemmSpec& spec, std::int64_t M, const Options& options) {
  check_spec(spec);
  if (!options.enabled || !options.autotune) return default_gemm_variant();
  try {
    return tuned_variant(spec, M, options);
  } catch (const Error& e) {
    warn_once("tune", std::string("autotuning failed: ") + e.what());
    return default_gemm_variant();
  }
}

GemmKernel GemmKernel::generic(const GemmSpec& spec) {
  check_spec(spec);
  GemmKernel k;
  k.spec_ = spec;
  k.variant_ = "generic";
  k.why_ = "the generic kernel was asked for";
  k.scratch_floats_ = detail::generic_gemm_scratch_floats(spec);
  return k;
}

std::future<GemmKernel> GemmKernel::get_async(const GemmSpec& spec, std::int64_t M, const Options& options) {
  check_spec(spec);
  return std::async(std::launch::async, [spec, M, options] { return get(spec, M, options); });
}

GemmKernel GemmKernel::get(const GemmSpec& spec, std::int64_t M, const Options& options, const GemmVariant* variant) {
  check_spec(spec);
  const GemmVariant v = variant ? *variant : gemm_variant_for(spec, M, options);
  const LoadedKernel lib = load_kernel(generate_gemm(spec, v), options);
  GemmKernel k;
  k.spec_ = spec;
  k.fn_ = reinterpret_cast<lmcore_gemm_fn>(lib.symbol("lmcore_gemm_epilogue"));
  auto scratch = reinterpret_cast<lmcore_gemm_scratch_floats_fn>(lib.symbol("lmcore_gemm_scratch_floats"));
  auto panels = reinterpret_cast<lmcore_gemm_scratch_floats_fn>(lib.symbol("lmcore_gemm_packed_panels"));
  auto packed = reinterpret_cast<lmcore_gemm_scratch_floats_fn>(lib.symbol("lmcore_gemm_packed_floats"));
  k.pack_b_ = reinterpret_cast<lmcore_gemm_pack_b_fn>(lib.symbol("lmcore_gemm_pack_b"));
  if (lib.handle && (!k.fn_ || !scratch || !panels || !packed || !k.pack_b_)) {
    k.why_ = lib.path + " lacks one of lmcore_gemm_epilogue, _scratch_floats, _packed_panels, _packed_floats, _pack_b";
    warn_once("load", k.why_);
    k.fn_ = nullptr;
    k.pack_b_ = nullptr;
  } else {
    k.why_ = lib.why;
  }
  k.scratch_floats_ = k.fn_ ? scratch() : detail::generic_gemm_scratch_floats(spec);
  k.packed_panels_ = k.fn_ ? panels() : 0;
  k.packed_floats_ = k.fn_ ? packed() : 0;
  k.variant_ = k.fn_ ? v.to_string() : "generic";
  return k;
}

void GemmKernel::run(const GemmOperands& o, std::int64_t M) const {
  const GemmSpec& s = spec_;
  LMCORE_CHECK(M >= 0, "codegen gemm: M must be >= 0, found {}", M);
  if (M == 0) return;
  LMCORE_CHECK(o.a && o.b && o.c, "codegen gemm ({}): a, b and c are required", s.to_string());
  LMCORE_CHECK(!s.bias || o.bias, "codegen gemm ({}): the spec adds a bias, but bias is null", s.to_string());
  LMCORE_CHECK(!s.residual || o.residual, "codegen gemm ({}): the spec adds a residual, but residual is null",
               s.to_string());
  LMCORE_CHECK(!s.store_pre || o.pre, "codegen gemm ({}): the spec stores the product, but pre is null", s.to_string());
  LMCORE_CHECK(o.lda >= s.K, "codegen gemm: lda {} < K {}", o.lda, s.K);
  LMCORE_CHECK(o.ldb >= (s.b_trans ? s.K : s.nb()), "codegen gemm: ldb {} < {}", o.ldb, s.b_trans ? s.K : s.nb());
  LMCORE_CHECK(o.ldc >= s.out_cols(), "codegen gemm: ldc {} < {}", o.ldc, s.out_cols());
  LMCORE_CHECK(s.act != Act::dswiglu || o.aux, "codegen gemm ({}): the SwiGLU backward reads gate | up, but aux is null",
               s.to_string());
  LMCORE_CHECK(s.act != Act::dswiglu || o.ldx >= 2 * s.N, "codegen gemm: ldx {} < 2N {}", o.ldx, 2 * s.N);
  LMCORE_CHECK(!s.store_pre || o.ldp >= s.nb(), "codegen gemm: ldp {} < {}", o.ldp, s.nb());
  LMCORE_CHECK(!s.residual || o.ldr >= s.N, "codegen gemm: ldr {} < N {}", o.ldr, s.N);
  run_parallel(s, {fn_, pack_b_, scratch_floats_, packed_panels_, packed_floats_}, o, M);
}

}  // namespace lmcore::codegen
