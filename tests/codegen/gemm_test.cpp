// GEMM + fused epilogue kernels (both cores, several tilings, generated and generic) against the f64
// reference. Bounds from f32's u = 2^-24: the product of a K-term dot product is within (K + 2) u S,
// S = sum |a b| + |bias|; SiLU/GELU have slopes below 1.2 and add ~10 u of their own (exp via a
// polynomial, the division); every bound is checked to reject a 1% error at the largest element.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "codegen_test_util.h"
#include "lmcore/base/aligned_allocator.h"
#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/gemm.h"
#include "lmcore/core/error.h"

namespace lmcore::codegen {
namespace {

using testing::within_bounds;

constexpr double kU = 1.0 / (1 << 24);

// Buffers on 64-byte boundaries (the kernels' streaming stores need whole aligned lines).
using Floats = std::vector<float, CacheAlignedAllocator<float>>;

// Runs `k` on M rows with padded leading dimensions and checks C and (when stored) P. Padding: 3 floats
// (rows start anywhere), or with `aligned_rows` up to the next 16 floats plus 16 (every row on a 64-byte
// boundary, as in the trainer's arena: the path of the streaming stores).
void check_gemm(const GemmKernel& k, std::int64_t M, unsigned seed, bool aligned_rows = false) {
  const GemmSpec& s = k.spec();
  SCOPED_TRACE(s.to_string() + " variant " + k.variant() + " M=" + std::to_string(M));
  const std::int64_t N = s.N, K = s.K, NB = s.nb(), NC = s.out_cols();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.5f, 1.5f);
  auto fill = [&](std::vector<float>& v) { for (auto& x : v) x = d(rng); };
  // Dense copies for the reference; padded (ld = size + 3) buffers for the kernel.
  std::vector<float> a(M * K), b(NB * K), bias(NB), res(M * N), aux(M * 2 * N);
  fill(a); fill(b); fill(bias); fill(res); fill(aux);
  auto ld = [&](std::int64_t cols) { return aligned_rows ? (cols + 15) / 16 * 16 + 16 : cols + 3; };
  const std::int64_t lda = ld(K), ldb = ld(s.b_trans ? K : NB), ldc = ld(NC), ldp = ld(NB), ldr = ld(N),
                     ldx = ld(2 * N);
  Floats ap(M * lda, NAN), bp((s.b_trans ? NB : K) * ldb, NAN), rp(M * ldr, NAN);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t i = 0; i < K; ++i) ap[m * lda + i] = a[m * K + i];
  const std::int64_t brows = s.b_trans ? NB : K, bcols = s.b_trans ? K : NB;
  for (std::int64_t r = 0; r < brows; ++r)
    for (std::int64_t i = 0; i < bcols; ++i) bp[r * ldb + i] = b[r * bcols + i];
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t i = 0; i < N; ++i) rp[m * ldr + i] = res[m * N + i];
  Floats xp(M * ldx, NAN);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t i = 0; i < 2 * N; ++i) xp[m * ldx + i] = aux[m * 2 * N + i];
  Floats c(M * ldc, -7.0f), pre(M * ldp, -7.0f);
  GemmOperands o{ap.data(), lda, bp.data(), ldb, c.data(), ldc, pre.data(), ldp, bias.data(), rp.data(), ldr,
                 xp.data(), ldx};
  k.run(o, M);

  std::vector<double> want_c(M * NC), want_p(M * NB);
  reference::gemm_epilogue(want_c.data(), want_p.data(), a.data(), b.data(), bias.data(), res.data(), M, s, aux.data());
  std::vector<double> ep(M * NB);  // error bound of each product
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < NB; ++n) {
      double S = s.bias ? std::abs(bias[n]) : 0.0;
      for (std::int64_t i = 0; i < K; ++i)
        S += std::abs(a[m * K + i] * (s.b_trans ? b[n * K + i] : b[i * NB + n]));
      ep[m * NB + n] = (K + 2) * kU * S + 1e-30;
    }
  std::vector<double> got_c(M * NC), bound_c(M * NC);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N && s.act == Act::dswiglu; ++n) {
      // dg = P u s (1 + g (1 - s)), du = P g s: the product's error times the factor, plus ~20 u of the
      // factor's own (exp polynomial, division, the cancellation in 1 + g (1 - s) bounded by 1 + |g|).
      const double p = want_p[m * NB + n], e = ep[m * NB + n], g = aux[m * 2 * N + n], u = aux[m * 2 * N + N + n];
      const double sg = 1 / (1 + std::exp(-g));
      const double fg = std::abs(u) * sg * (1 + std::abs(g)), fu = std::abs(g) * sg;
      for (int h = 0; h < 2; ++h) {
        const std::int64_t j = m * NC + h * N + n;
        const double f = h == 0 ? fg : fu;
        got_c[j] = c[m * ldc + h * N + n];
        bound_c[j] = 1.1 * e * f + 20 * kU * std::abs(p) * f + 1e-30;
      }
      EXPECT_EQ(c[m * ldc + NC], -7.0f) << "wrote past column 2N of row " << m;
    }
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N && s.act != Act::dswiglu; ++n) {
      const double p = want_p[m * NB + n], e = ep[m * NB + n];
      const double cw = want_c[m * N + n] - (s.residual ? res[m * N + n] : 0.0);  // before the residual
      double b2 = 0;
      switch (s.act) {
        case Act::none: b2 = e; break;
        case Act::silu: b2 = 1.1 * e + 10 * kU * std::abs(cw); break;
        case Act::gelu: b2 = 1.2 * e + 10 * kU * (std::abs(cw) + std::abs(p)); break;
        case Act::swiglu: {
          const double up = want_p[m * NB + N + n], eu = ep[m * NB + N + n];
          const double sg = p / (1 + std::exp(-p));
          b2 = 1.1 * e * (std::abs(up) + eu) + std::abs(sg) * eu + 10 * kU * std::abs(cw);
          break;
        }
        case Act::dswiglu: break;  // above
      }
      if (s.residual) b2 += 2 * kU * (std::abs(want_c[m * N + n]) + std::abs(res[m * N + n]));
      got_c[m * N + n] = c[m * ldc + n];
      bound_c[m * N + n] = b2 + 1e-30;
      EXPECT_EQ(c[m * ldc + N], -7.0f) << "wrote past column N of row " << m;
    }
  EXPECT_TRUE(within_bounds("c", got_c, want_c, bound_c));
  if (s.store_pre) {
    std::vector<double> got_p(M * NB);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < NB; ++n) got_p[m * NB + n] = pre[m * ldp + n];
    EXPECT_TRUE(within_bounds("pre", got_p, want_p, ep));
    for (std::int64_t m = 0; m < M; ++m) EXPECT_EQ(pre[m * ldp + NB], -7.0f) << "wrote past column NB of row " << m;
  } else {
    EXPECT_EQ(pre[0], -7.0f) << "pre written although the spec does not store it";
  }
}

struct Epi {
  bool bias;
  Act act;
  bool residual, pre;
};
const Epi kEpilogues[] = {{false, Act::none, false, false}, {true, Act::silu, false, false},
                          {true, Act::gelu, true, false},   {false, Act::swiglu, false, true},
                          {true, Act::swiglu, true, true},  {false, Act::none, true, false},
                          {false, Act::dswiglu, false, false}};

GemmSpec make(std::int64_t N, std::int64_t K, bool bt, const Epi& e) { return {N, K, bt, e.bias, e.act, e.residual, e.pre}; }

std::vector<GemmVariant> test_variants() {
  std::vector<GemmVariant> v(5);
  v[0].tile_m = 32, v[0].tile_n = 256;
  v[1].tile_m = 5, v[1].tile_n = 7;  // tiles that cut every shape into ragged pieces
  v[2] = default_gemm_variant();
  // Register blocks and row blocks that leave ragged strips, panels and blocks at every shape.
  // (block_k 7 and 64: passes over K with a ragged last one; 0: one pass.)
  v[3].core = GemmVariant::micro, v[3].micro_m = 3, v[3].micro_nv = 1, v[3].block_m = 9, v[3].block_k = 7;
  v[3].vector_floats = 8;
  v[4].core = GemmVariant::micro, v[4].micro_m = 5, v[4].micro_nv = 3, v[4].block_m = 10, v[4].block_k = 64;
  v[4].vector_floats = 4;
  return v;
}

TEST(CodegenGemm, VariantsMatchReference) {
  const Options o = testing::test_options();
  const bool cc = testing::have_compiler();
  std::vector<GeneratedSource> sources;
  std::vector<std::pair<GemmSpec, GemmVariant>> cases;
  for (const auto& v : test_variants())
    for (bool bt : {false, true})
      for (const Epi& e : {kEpilogues[0], kEpilogues[2], kEpilogues[4], kEpilogues[6]})
        cases.push_back({make(65, 130, bt, e), v});
  for (const auto& [s, v] : cases) sources.push_back(generate_gemm(s, v));
  load_kernels(sources, o);  // all compiles at once
  for (const auto& [s, v] : cases) {
    const GemmKernel k = GemmKernel::get(s, 67, o, &v);
    EXPECT_EQ(k.generated(), cc) << k.why_generic();
    check_gemm(k, 67, 3);
    check_gemm(k, 1, 4);
  }
}

TEST(CodegenGemm, ShapesAndEpiloguesMatchReference) {
  Options o = testing::test_options();
  o.autotune = false;
  const bool cc = testing::have_compiler();
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1}, {7, 5}, {33, 17}, {63, 64}, {64, 65}, {65, 7}, {4097, 3}};
  std::vector<GeneratedSource> sources;
  for (auto [N, K] : shapes)
    for (const Epi& e : kEpilogues) sources.push_back(generate_gemm(make(N, K, true, e), default_gemm_variant()));
  load_kernels(sources, o);
  for (auto [N, K] : shapes)
    for (const Epi& e : kEpilogues) {
      const GemmKernel k = GemmKernel::get(make(N, K, true, e), 40, o);
      EXPECT_EQ(k.generated(), cc) << k.why_generic();
      for (std::int64_t M : {1, 16, 40}) check_gemm(k, M, static_cast<unsigned>(N + K + M));
      check_gemm(GemmKernel::generic(make(N, K, true, e)), 40, 9);
      check_gemm(GemmKernel::generic(make(N, K, false, e)), 17, 10);
    }
}

// Rows on 64-byte boundaries (the stored product goes through streaming stores there) and row blocks
// larger than the rows a thread gets (the tuner's large-MC candidates), at sizes that leave ragged
// panels and vectors (N 65, K 130) and whole ones (N 64).
TEST(CodegenGemm, AlignedRowsAndLargeRowBlocksMatchReference) {
  const Options o = testing::test_options();
  const bool cc = testing::have_compiler();
  std::vector<GemmVariant> variants{default_gemm_variant()};
  for (const auto& v : gemm_candidates({64, 130, true, false, Act::swiglu, false, true}))
    if (v.core == GemmVariant::micro && v.block_m > 200) variants.push_back(v);  // large blocks
  ASSERT_GT(variants.size(), 1u) << "no large-block candidate";
  GemmVariant blas;
  blas.tile_m = 128, blas.tile_n = 1 << 20;
  variants.push_back(blas);
  std::vector<std::pair<GemmSpec, GemmVariant>> cases;
  for (const auto& v : variants)
    for (std::int64_t N : {64, 65})
      for (const Epi& e : {kEpilogues[3], kEpilogues[4], kEpilogues[5], kEpilogues[6]}) cases.push_back({make(N, 130, true, e), v});
  std::vector<GeneratedSource> sources;
  for (const auto& [s, v] : cases) sources.push_back(generate_gemm(s, v));
  load_kernels(sources, o);
  for (const auto& [s, v] : cases) {
    const GemmKernel k = GemmKernel::get(s, 200, o, &v);
    EXPECT_EQ(k.generated(), cc) << k.why_generic();
    check_gemm(k, 200, 11, true);
    check_gemm(k, 67, 12, true);
    check_gemm(k, 33, 13, false);
  }
}

TEST(CodegenGemm, AutotunePicksAndRecordsAWinner) {
  testing::TempDir dir;
  Options o = testing::test_options(dir.path());
  o.autotune = true;
  const GemmSpec s{48, 32, true, false, Act::swiglu, false, true};
  const GemmKernel k = GemmKernel::get(s, 64, o);
  if (!testing::have_compiler()) {
    EXPECT_FALSE(k.generated());
    return;
  }
  ASSERT_TRUE(k.generated()) << k.why_generic();
  check_gemm(k, 64, 5);
  KernelCache cache(o.cache_dir, o.cache_max_bytes);
  // One tuning record naming the winner and every candidate's time; a second get reuses it.
  std::vector<std::string> names;
  for (const auto& v : gemm_candidates(s)) names.push_back(v.to_string());
  testing::expect_one_tuning_record(dir.path(), cache, k.variant(), names);
  EXPECT_EQ(cache.list().size(), gemm_candidates(s).size()) << "every candidate compiled and cached";
  EXPECT_EQ(GemmKernel::get(s, 60, o).variant(), k.variant());  // same bucket: the record, no new tuning
  o.autotune = false;
  EXPECT_EQ(GemmKernel::get(s, 64, o).variant(), default_gemm_variant().to_string());
}

TEST(CodegenGemm, CrashingOrHangingCandidateCannotTakeTheCallerDown) {
  std::vector<double> secs;
  const int best = time_candidates_in_children(
      4,
      [](std::size_t i) -> double {
        if (i == 0) ::abort();                   // crashes
        if (i == 1) for (;;) ::pause();          // hangs
        if (i == 2) return 0.5;
        return 0.25;
      },
      1.0, &secs);
  EXPECT_EQ(best, 3);
  EXPECT_TRUE(std::isinf(secs[0]) && std::isinf(secs[1]));
  EXPECT_EQ(secs[2], 0.5);
}

TEST(CodegenGemm, BadOperandsAreErrors) {
  const GemmKernel k = GemmKernel::generic({8, 4, true, true, Act::none, false, false});
  std::vector<float> a(32), b(32), c(64);
  try {
    k.run({a.data(), 4, b.data(), 4, c.data(), 8}, 4);
    FAIL() << "a null bias was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias is null"), std::string::npos) << e.what();
  }
  std::vector<float> bias(8);
  GemmOperands o{a.data(), 3, b.data(), 4, c.data(), 8};
  o.bias = bias.data();
  EXPECT_THROW(k.run(o, 4), Error);  // lda 3 < K 4
  EXPECT_THROW(GemmKernel::generic({0, 4}), Error);
  EXPECT_THROW(GemmVariant::parse("blas 32by8"), Error);
  for (const auto& v : gemm_candidates({512, 64})) EXPECT_EQ(GemmVariant::parse(v.to_string()).to_string(), v.to_string());
  EXPECT_THROW(GemmVariant::parse("micro 12x2 W=16 MC=96"), Error);   // KC missing
  EXPECT_THROW(GemmVariant::parse("blas 32x8 extra"), Error);
}

}  // namespace
}  // namespace lmcore::codegen
