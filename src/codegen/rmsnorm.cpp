// RmsNormKernel: the generated kernel when one can be had, else the generic one below; the row split
// over threads is the caller side of the kernel ABI.
#include "lmcore/codegen/rmsnorm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "lmcore/base/page_offset_buffer.h"
#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/gemm.h"
#include "lmcore/codegen/generator.h"
#include "lmcore/codegen/runtime.h"
#include "lmcore/core/error.h"
#include "lmcore/core/low_precision.h"
#include "lmcore/core/parallel.h"
#include "sha256.h"

namespace lmcore::codegen {

namespace {

std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(cols, 1)); }

// Fewer rows than this read the caller's weight where it is: the copy would cost as much as it saves.
constexpr std::int64_t kStageRows = 16;

void check_spec(const RmsNormSpec& spec) {
  LMCORE_CHECK(spec.hidden >= 1, "codegen rmsnorm: hidden size must be >= 1, found {}", spec.hidden);
  LMCORE_CHECK(std::isfinite(spec.eps) && spec.eps >= 0, "codegen rmsnorm: eps must be finite and >= 0, found {}",
               spec.eps);
}

// Element access of the generic kernel by dtype.
inline float load(const void* p, std::int64_t i, DType t) {
  return t == DType::f32 ? static_cast<const float*>(p)[i] : bf16::from_bits(static_cast<const std::uint16_t*>(p)[i]).to_f32();
}
inline void store(void* p, std::int64_t i, float v, DType t) {
  if (t == DType::f32) static_cast<float*>(p)[i] = v;
  else static_cast<std::uint16_t*>(p)[i] = bf16::from_f32(v).bits;
}

}  // namespace

RmsNormVariant default_rmsnorm_variant() { return {native_vector_floats(), 4}; }

std::vector<RmsNormVariant> rmsnorm_candidates() {
  std::vector<RmsNormVariant> c;
  const int w = native_vector_floats();
  for (int width : {w, 8})
    for (int u : {1, 2, 4, 8})
      if (width <= w && std::none_of(c.begin(), c.end(), [&](const RmsNormVariant& v) {
            return v.vector_floats == width && v.unroll == u;
          }))
        c.push_back({width, u});
  return c;
}

RmsNormVariant parse_rmsnorm_variant(const std::string& s) {
  int w = 0, u = 0, used = 0;
  if (std::sscanf(s.c_str(), "W=%d U=%d%n", &w, &u, &used) != 2 || used != static_cast<int>(s.size()))
    fail("codegen rmsnorm: cannot parse the variant '{}', expected 'W=L U=A'", s);
  return {w, u};
}

namespace {

// Seconds of one forward + backward over `rows` rows, single-threaded: best of 5 after a warm-up.
double time_rmsnorm(const RmsNormSpec& s, const LoadedKernel& lib, std::int64_t rows) {
  auto fwd = reinterpret_cast<lmcore_rmsnorm_forward_fn>(lib.symbol("lmcore_rmsnorm_forward"));
  auto bwd = reinterpret_cast<lmcore_rmsnorm_backward_fn>(lib.symbol("lmcore_rmsnorm_backward"));
  if (!fwd || !bwd) return -1.0;
  const std::size_t n = static_cast<std::size_t>(rows * s.hidden), C = static_cast<std::size_t>(s.hidden);
  std::vector<float> x(n), r(n), xo(n), out(n), dout(n), dx(n), w(C), dw(C), rstd(static_cast<std::size_t>(rows));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto* v : {&x, &r, &dout, &w})
    for (auto& e : *v) e = d(rng);
  if (s.io == DType::bf16 || s.out == DType::bf16)  // f32 +-1 read as bf16 pairs: 0 and +-1, never NaN
    for (auto* v : {&x, &r, &dout})
      for (auto& e : *v) e = e < 0 ? -1.0f : 1.0f;
  const lmcore_rmsnorm_forward_args fa{out.data(), rstd.data(), x.data(), r.data(), xo.data(), w.data(), 0, rows};
  const lmcore_rmsnorm_backward_args ba{dx.data(), dw.data(), dout.data(), s.residual ? xo.data() : x.data(),
                                        w.data(),  rstd.data(), 0,        rows};
  fwd(&fa);
  bwd(&ba);
  double best = INFINITY;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fwd(&fa);
    bwd(&ba);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

RmsNormVariant rmsnorm_variant_for(const RmsNormSpec& spec, const Options& o) {
  check_spec(spec);
  if (!o.enabled || !o.autotune) return default_rmsnorm_variant();
  try {
    std::string why;
    const auto cc = detail::cached_compiler(o, &why);
    if (!cc) return default_rmsnorm_variant();  // load_kernel will say why
    const auto cands = rmsnorm_candidates();
    std::vector<GeneratedSource> sources;
    std::string all_sources;
    for (const auto& v : cands) {
      sources.push_back(generate_rmsnorm(spec, v));
      all_sources += sources.back().source;
    }
    const std::string key =
        detail::sha256_hex(fmt::format("rmsnorm-tune 1 abi {}\n{}\n{} {}\n{}\n{}\n{}", LMCORE_KERNEL_ABI_VERSION,
                                       spec.to_string(), cc->path, cc->version, cc->flags_string(),
                                       detail::cpu_features(), detail::sha256_hex(all_sources)))
            .substr(0, 40);
    KernelCache cache(o.cache_dir, o.cache_max_bytes);
    if (auto rec = cache.read_tuning(key)) {
      try {
        return parse_rmsnorm_variant(rec->substr(0, rec->find(';')));
      } catch (const Error&) {
        // An unreadable record is tuned again below.
      }
    }
    const auto loaded = load_kernels(sources, o);
    // About 4 MiB of f32 rows (at least 16 rows): the size of one thread's share of a model's activations.
    const std::int64_t rows = std::max<std::int64_t>(16, (1 << 20) / spec.hidden);
    std::vector<double> secs(cands.size(), INFINITY);
    for (int round = 0; round < 3; ++round) {  // interleaved: a disturbance spoils one sample, not a figure
      std::vector<double> r;
      time_candidates_in_children(cands.size(), [&](std::size_t i) { return time_rmsnorm(spec, loaded[i], rows); },
                                  30.0, &r);
      for (std::size_t i = 0; i < cands.size(); ++i) secs[i] = std::min(secs[i], r[i]);
    }
    int best = -1;
    for (std::size_t i = 0; i < cands.size(); ++i)
      if (std::isfinite(secs[i]) && (best < 0 || secs[i] < secs[static_cast<std::size_t>(best)]))
        best = static_cast<int>(i);
    if (best < 0) return default_rmsnorm_variant();
    std::string record = cands[static_cast<std::size_t>(best)].to_string() + ";";
    for (std::size_t i = 0; i < cands.size(); ++i)
      record += fmt::format(" {}={:.1f}us", cands[i].to_string(), std::isfinite(secs[i]) ? secs[i] * 1e6 : -1.0);
    cache.write_tuning(key, record);
    return cands[static_cast<std::size_t>(best)];
  } catch (const Error& e) {
    warn_once("tune", std::string("autotuning failed: ") + e.what());
    return default_rmsnorm_variant();
  }
}

namespace detail {

// The generic kernel: the same arithmetic in plain loops over a run-time C; 8 partial sums so that the
// compiler can vectorise the reduction without reassociating.
void generic_rmsnorm_forward(const RmsNormSpec& spec, const lmcore_rmsnorm_forward_args& a) {
  const std::int64_t C = spec.hidden;
  for (std::int64_t n = a.row_begin; n < a.row_end; ++n) {
    float part[8] = {};
    for (std::int64_t i = 0; i < C; ++i) {
      float v = load(a.inp, n * C + i, spec.io);
      if (spec.residual) {
        v += load(a.residual, n * C + i, spec.io);
        store(a.residual_out, n * C + i, v, spec.io);
        v = load(a.residual_out, n * C + i, spec.io);
      }
      part[i & 7] += v * v;
    }
    float ss = 0;
    for (float p : part) ss += p;
    const float rs = 1.0f / std::sqrt(ss / static_cast<float>(C) + spec.eps);
    a.rstd[n] = rs;
    const void* xs = spec.residual ? a.residual_out : a.inp;
    for (std::int64_t i = 0; i < C; ++i) store(a.out, n * C + i, load(xs, n * C + i, spec.io) * rs * a.weight[i], spec.out);
  }
}

void generic_rmsnorm_backward(const RmsNormSpec& spec, const lmcore_rmsnorm_backward_args& a) {
  const std::int64_t C = spec.hidden;
  for (std::int64_t n = a.row_begin; n < a.row_end; ++n) {
    const float rs = a.rstd[n];
    float part[8] = {};
    for (std::int64_t i = 0; i < C; ++i)
      part[i & 7] += load(a.dout, n * C + i, spec.out) * a.weight[i] * load(a.inp, n * C + i, spec.io);
    float dot = 0;
    for (float p : part) dot += p;
    const float k = rs * rs * rs * dot / static_cast<float>(C);
    for (std::int64_t i = 0; i < C; ++i) {
      const float d = load(a.dout, n * C + i, spec.out), x = load(a.inp, n * C + i, spec.io);
      store(a.dinp, n * C + i, load(a.dinp, n * C + i, spec.io) + rs * d * a.weight[i] - k * x, spec.io);
      a.dweight[i] += d * x * rs;
    }
  }
}

}  // namespace detail

RmsNormKernel RmsNormKernel::generic(const RmsNormSpec& spec) {
  check_spec(spec);
  RmsNormKernel k;
  k.spec_ = spec;
  k.variant_ = "generic";
  k.why_ = "the generic kernel was asked for";
  return k;
}

std::future<RmsNormKernel> RmsNormKernel::get_async(const RmsNormSpec& spec, const Options& options) {
  check_spec(spec);
  return std::async(std::launch::async, [spec, options] { return get(spec, options); });
}

RmsNormKernel RmsNormKernel::get(const RmsNormSpec& spec, const Options& options, const RmsNormVariant* variant) {
  check_spec(spec);
  const RmsNormVariant v = variant ? *variant : rmsnorm_variant_for(spec, options);
  const GeneratedSource src = generate_rmsnorm(spec, v);
  const LoadedKernel lib = load_kernel(src, options);
  RmsNormKernel k;
  k.spec_ = spec;
  k.fwd_ = reinterpret_cast<lmcore_rmsnorm_forward_fn>(lib.symbol("lmcore_rmsnorm_forward"));
  k.bwd_ = reinterpret_cast<lmcore_rmsnorm_backward_fn>(lib.symbol("lmcore_rmsnorm_backward"));
  if (lib.handle && (!k.fwd_ || !k.bwd_)) {
    k.why_ = lib.path + " lacks lmcore_rmsnorm_forward / lmcore_rmsnorm_backward";
    warn_once("load", k.why_);
    k.fwd_ = nullptr;
    k.bwd_ = nullptr;
  } else {
    k.why_ = lib.why;
  }
  k.variant_ = k.fwd_ ? v.to_string() : "generic";
  return k;
}

void RmsNormKernel::forward(void* out, float* rstd, const void* inp, const void* residual, void* residual_out,
                            const float* weight, std::int64_t N) const {
  LMCORE_CHECK(N >= 0, "codegen rmsnorm forward: N must be >= 0, found {}", N);
  LMCORE_CHECK(!spec_.residual || N == 0 || (residual && residual_out),
               "codegen rmsnorm forward: the spec fuses the residual add, so residual and residual_out are required");
  // The weight is read beside every output row: staged at the output's page offset (4K aliasing).
  const std::int64_t C = spec_.hidden;
  std::optional<PageOffsetBuffer<float>> staged;
  if (N >= kStageRows) weight = staged.emplace(weight, static_cast<std::size_t>(C), out).data();
  parallel_for(0, N, row_grain(C), [&](std::int64_t b, std::int64_t e) {
    const lmcore_rmsnorm_forward_args a{out, rstd, inp, spec_.residual ? residual : nullptr,
                                        spec_.residual ? residual_out : nullptr, weight, b, e};
    if (fwd_) fwd_(&a);
    else detail::generic_rmsnorm_forward(spec_, a);
  });
}

void RmsNormKernel::backward(void* dinp, float* dweight, const void* dout, const void* inp, const float* weight,
                             const float* rstd, std::int64_t N) const {
  LMCORE_CHECK(N >= 0, "codegen rmsnorm backward: N must be >= 0, found {}", N);
  const std::int64_t C = spec_.hidden;
  // dweight sums over all rows: k fixed chunks, each into its own partial, added in chunk order. The
  // partials are stored and the weight read beside every row of dinp, which is stored: both are placed
  // at the page offset of their chunk's first dinp row (4K aliasing).
  const std::int64_t k = std::max<std::int64_t>(1, std::min<std::int64_t>(num_threads(), N / row_grain(C)));
  const std::size_t esz = dtype_size(spec_.io);
  auto row_of_dinp = [&](std::int64_t n) { return static_cast<const unsigned char*>(dinp) + n * C * esz; };
  std::vector<PageOffsetBuffer<float>> partial;
  for (std::int64_t c = 0; c < k; ++c) partial.emplace_back(static_cast<std::size_t>(C), row_of_dinp(c * N / k));
  std::optional<PageOffsetBuffer<float>> staged;
  if (N >= kStageRows) weight = staged.emplace(weight, static_cast<std::size_t>(C), dinp).data();
  parallel_for(0, k, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const lmcore_rmsnorm_backward_args a{dinp, partial[c].data(), dout, inp, weight, rstd, c * N / k,
                                           (c + 1) * N / k};
      if (bwd_) bwd_(&a);
      else detail::generic_rmsnorm_backward(spec_, a);
    }
  });
  for (std::int64_t c = 0; c < k; ++c)
    for (std::int64_t i = 0; i < C; ++i) dweight[i] += partial[c].data()[i];
}

}  // namespace lmcore::codegen
