// GemmKernel: tuning (candidates compiled in parallel, timed in forked children), the generic kernel,
// and the row split over threads.
#include "lmcore/codegen/gemm.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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

void check_spec(const GemmSpec& s) {
  LMCORE_CHECK(s.N >= 1 && s.K >= 1, "codegen gemm: N and K must be >= 1, found N={} K={}", s.N, s.K);
}

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

GemmVariant default_gemm_variant() { return GemmVariant{}; }

std::vector<GemmVariant> gemm_candidates(const GemmSpec& spec) {
  std::vector<GemmVariant> c;
  // Small tiles keep the product in L1/L2 for the epilogue; tall ones amortise sgemm's packing of B
  // (repeated per call) over more rows.
  // Full-width tiles pack each A block once (A is re-packed per column tile).
  for (auto [tm, tn] : {std::pair{32, 256}, std::pair{64, 512}, std::pair{256, 256}, std::pair{512, 128},
                        std::pair{128, 1 << 20}}) {
    GemmVariant v;
    v.tile_m = tm;
    v.tile_n = static_cast<int>(std::min<std::int64_t>(tn, spec.N));
    c.push_back(v);
  }
  const int w = native_vector_floats();
  for (int mr : {4, 6}) {
    GemmVariant v;
    v.core = GemmVariant::micro;
    v.micro_m = mr;
    v.vector_floats = w;
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

// Seconds per call of `fn` on `rows` rows of random operands, single-threaded: best of 5 after a warm-up.
double time_gemm(const GemmSpec& s, lmcore_gemm_fn fn, std::int64_t scratch_floats, std::int64_t rows) {
  const std::int64_t N = s.N, NB = s.nb(), K = s.K;
  std::vector<float> a(static_cast<std::size_t>(rows * K)), b(static_cast<std::size_t>(NB * K)),
      c(static_cast<std::size_t>(rows * N)), pre(static_cast<std::size_t>(rows * NB)), bias(static_cast<std::size_t>(NB)),
      res(static_cast<std::size_t>(rows * N)), scratch(static_cast<std::size_t>(scratch_floats));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto* v : {&a, &b, &bias, &res})
    for (auto& x : *v) x = d(rng);
  const lmcore_gemm_args args{a.data(), b.data(), c.data(), pre.data(), bias.data(), res.data(),
                              detail::sgemm_callback, scratch.data(), K, s.b_trans ? K : NB, N, NB, N, 0, rows};
  const BlasSingleThreaded guard;
  fn(&args);
  double best = INFINITY;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(&args);
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
  const std::string tune_key =
      detail::sha256_hex(fmt::format("gemm-tune 1 abi {}\n{}\nM={}\n{} {}\n{}\n{}", LMCORE_KERNEL_ABI_VERSION,
                                     spec.to_string(), bucket, cc->path,
                                     cc->version, cc->flags_string(), detail::cpu_features()))
          .substr(0, 40);
  KernelCache cache(o.cache_dir, o.cache_max_bytes);
  if (auto rec = cache.read_tuning(tune_key)) {
    try {
      return GemmVariant::parse(rec->substr(0, rec->find(';')));
    } catch (const Error&) {
      // An unreadable record is tuned again below.
    }
  }
  const auto cands = gemm_candidates(spec);
  std::vector<GeneratedSource> sources;
  for (const auto& v : cands) sources.push_back(generate_gemm(spec, v));
  const auto loaded = load_kernels(sources, o);
  // The rows one thread gets in a full-machine run (at least one tile, at most 512 for a quick tuning).
  const std::int64_t rows = std::clamp<std::int64_t>(M / std::max(1, num_threads()), 16, 512);
  // Three rounds over all candidates, each candidate's best kept: on a shared machine a disturbance
  // then spoils one sample of a candidate, not its figure.
  std::vector<double> secs(cands.size(), INFINITY);
  for (int round = 0; round < 3; ++round) {
    std::vector<double> r;
    time_candidates_in_children(
        cands.size(),
        [&](std::size_t i) {
          auto fn = reinterpret_cast<lmcore_gemm_fn>(loaded[i].symbol("lmcore_gemm_epilogue"));
          auto sz = reinterpret_cast<lmcore_gemm_scratch_floats_fn>(loaded[i].symbol("lmcore_gemm_scratch_floats"));
          return fn && sz ? time_gemm(spec, fn, sz(), rows) : -1.0;
        },
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
  if (lib.handle && (!k.fn_ || !scratch)) {
    k.why_ = lib.path + " lacks lmcore_gemm_epilogue / lmcore_gemm_scratch_floats";
    warn_once("load", k.why_);
    k.fn_ = nullptr;
  } else {
    k.why_ = lib.why;
  }
  k.scratch_floats_ = k.fn_ ? scratch() : detail::generic_gemm_scratch_floats(spec);
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
  LMCORE_CHECK(o.ldc >= s.N, "codegen gemm: ldc {} < N {}", o.ldc, s.N);
  LMCORE_CHECK(!s.store_pre || o.ldp >= s.nb(), "codegen gemm: ldp {} < {}", o.ldp, s.nb());
  LMCORE_CHECK(!s.residual || o.ldr >= s.N, "codegen gemm: ldr {} < N {}", o.ldr, s.N);
  const std::int64_t threads = in_parallel_region() ? 1 : num_threads();
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, M / 16));
  const BlasSingleThreaded guard;
  parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      // Block boundaries on multiples of 16 rows (whole tiles of every variant's row blocking).
      const std::int64_t lo = (M * p / parts) / 16 * 16;
      const std::int64_t hi = p + 1 == parts ? M : (M * (p + 1) / parts) / 16 * 16;
      if (hi <= lo) continue;
      // Working memory kept per thread between calls (a fresh buffer per call would fault in its pages).
      thread_local std::vector<float> scratch;
      if (scratch.size() < static_cast<std::size_t>(scratch_floats_)) scratch.resize(static_cast<std::size_t>(scratch_floats_));
      const lmcore_gemm_args args{o.a, o.b, o.c, o.pre, o.bias, o.residual, detail::sgemm_callback, scratch.data(),
                                  o.lda, o.ldb, o.ldc, o.ldp, o.ldr, lo, hi};
      if (fn_) fn_(&args);
      else detail::generic_gemm(s, args);
    }
  });
}

}  // namespace lmcore::codegen
