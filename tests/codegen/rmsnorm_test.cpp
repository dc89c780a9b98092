// Generated and generic RMSNorm kernels against the scalar reference, for awkward hidden sizes (1, 7, 63,
// 64, 65, 4097: below, at and around a vector and an unrolled block, and a long row with a tail) and
// the dtype/fusion combinations. Bounds come from f32's unit roundoff u = 2^-24 and the longest
// summation chain (n = C/4 + 32 covers every variant: W >= 4 lanes), plus bf16's u = 2^-8 for the final
// rounding of a bf16 result; every check also asserts that a 1% error at the largest element would fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "codegen_test_util.h"
#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/gemm.h"
#include "lmcore/codegen/rmsnorm.h"
#include "lmcore/core/error.h"

namespace lmcore::codegen {
namespace {

using testing::random_buffer;
using testing::within_bounds;
using testing::value_at;

constexpr double kU32 = 1.0 / (1 << 24), kUbf16 = 1.0 / (1 << 8);

struct Config {
  DType io, out;
  bool residual;
};
const Config kConfigs[] = {{DType::f32, DType::f32, false},
                           {DType::f32, DType::f32, true},
                           {DType::bf16, DType::bf16, false},
                           {DType::bf16, DType::bf16, true},
                           {DType::f32, DType::bf16, true}};
const std::int64_t kSizes[] = {1, 7, 63, 64, 65, 4097};

// Runs forward and backward of `k` on N rows and compares every output with the reference.
void check_kernel(const RmsNormKernel& k, std::int64_t N, unsigned seed) {
  const RmsNormSpec& s = k.spec();
  const std::int64_t C = s.hidden, NC = N * C;
  SCOPED_TRACE(s.to_string() + " variant " + k.variant());
  std::mt19937 rng(seed);
  auto inp = random_buffer(rng, NC, s.io, -2, 2);
  auto res = random_buffer(rng, NC, s.io, -2, 2);
  // One row much larger than the others: the bounds are relative per row.
  for (std::int64_t i = 0; i < C && N > 1; ++i) {
    if (s.io == DType::f32) reinterpret_cast<float*>(inp.data())[C + i] *= 1000.0f;
    else {
      auto* p = reinterpret_cast<std::uint16_t*>(inp.data()) + C + i;
      *p = reference::to_bf16(reference::from_bf16(*p) * 1024.0);
    }
  }
  std::vector<float> weight(static_cast<std::size_t>(C));
  std::uniform_real_distribution<float> wd(0.5f, 1.5f);
  for (auto& w : weight) w = wd(rng);

  // ---- forward ----
  std::vector<unsigned char> out(static_cast<std::size_t>(NC) * dtype_size(s.out));
  std::vector<unsigned char> rout(static_cast<std::size_t>(NC) * dtype_size(s.io), 0xAB);
  std::vector<float> rstd(static_cast<std::size_t>(N));
  k.forward(out.data(), rstd.data(), inp.data(), res.data(), rout.data(), weight.data(), N);
  std::vector<double> want_out(static_cast<std::size_t>(NC)), want_rstd(static_cast<std::size_t>(N));
  std::vector<unsigned char> want_rout(rout.size(), 0xAB);
  reference::rmsnorm_forward(want_out.data(), want_rstd.data(), want_rout.data(), inp.data(), res.data(),
                             weight.data(), N, s);
  if (s.residual) {
    EXPECT_TRUE(rout == want_rout) << "residual_out differs from the exactly rounded inp + residual";
  }
  const double n_chain = static_cast<double>(C) / 4 + 32;
  const double rstd_rel = 0.5 * n_chain * kU32 + 4 * kU32;
  {
    std::vector<double> got(rstd.begin(), rstd.end()), bound(static_cast<std::size_t>(N));
    for (std::int64_t n = 0; n < N; ++n) bound[n] = rstd_rel * want_rstd[n];
    EXPECT_TRUE(within_bounds("rstd", got, want_rstd, bound));
  }
  {
    const double out_round = s.out == DType::bf16 ? kUbf16 * (1 + rstd_rel) : 0;
    std::vector<double> got(static_cast<std::size_t>(NC)), bound(static_cast<std::size_t>(NC));
    for (std::int64_t i = 0; i < NC; ++i) {
      got[i] = value_at(out, i, s.out);
      bound[i] = (rstd_rel + 3 * kU32 + out_round) * std::abs(want_out[i]) + 1e-30;
    }
    EXPECT_TRUE(within_bounds("out", got, want_out, bound));
  }

  // ---- backward (x = the normalised input: residual_out when fused) ----
  const std::vector<unsigned char>& x = s.residual ? want_rout : inp;
  auto dout = random_buffer(rng, NC, s.out, -1, 1);
  auto dinp = random_buffer(rng, NC, s.io, -1, 1);
  std::vector<float> dweight(static_cast<std::size_t>(C));
  for (auto& w : dweight) w = wd(rng) - 1.0f;
  const auto dinp_in = dinp;
  const auto dweight_in = dweight;
  std::vector<double> want_dinp(static_cast<std::size_t>(NC)), want_dw(static_cast<std::size_t>(C));
  reference::rmsnorm_backward(want_dinp.data(), want_dw.data(), dinp_in.data(), dweight_in.data(), dout.data(),
                              x.data(), weight.data(), rstd.data(), N, s);
  k.backward(dinp.data(), dweight.data(), dout.data(), x.data(), weight.data(), rstd.data(), N);
  {
    std::vector<double> got(static_cast<std::size_t>(NC)), bound(static_cast<std::size_t>(NC));
    for (std::int64_t n = 0; n < N; ++n) {
      const double rs = rstd[n];
      double sum_gx = 0;  // sum |g x| over the row, the scale of the dot product's error
      for (std::int64_t i = 0; i < C; ++i)
        sum_gx += std::abs(value_at(dout, n * C + i, s.out) * weight[i] * value_at(x, n * C + i, s.io));
      for (std::int64_t i = 0; i < C; ++i) {
        const std::int64_t j = n * C + i;
        const double g = std::abs(value_at(dout, j, s.out) * weight[i]), xv = std::abs(value_at(x, j, s.io));
        const double grad = std::abs(want_dinp[j] - value_at(dinp_in, j, s.io));
        double b = 4 * kU32 * (rs * g + std::abs(value_at(dinp_in, j, s.io)) + grad) +
                   xv * rs * rs * rs / static_cast<double>(C) * (n_chain + 6) * kU32 * sum_gx;
        if (s.io == DType::bf16) b += kUbf16 * (std::abs(want_dinp[j]) + b);
        got[j] = value_at(dinp, j, s.io);
        bound[j] = b + 1e-30;
      }
    }
    EXPECT_TRUE(within_bounds("dinp", got, want_dinp, bound));
  }
  {
    std::vector<double> got(dweight.begin(), dweight.end()), bound(static_cast<std::size_t>(C));
    for (std::int64_t i = 0; i < C; ++i) {
      double sum = std::abs(dweight_in[i]);
      for (std::int64_t n = 0; n < N; ++n)
        sum += std::abs(value_at(dout, n * C + i, s.out) * value_at(x, n * C + i, s.io) * rstd[n]);
      bound[i] = (static_cast<double>(N) + 40) * kU32 * sum + 1e-30;
    }
    EXPECT_TRUE(within_bounds("dweight", got, want_dw, bound));
  }
}

std::vector<RmsNormSpec> all_specs() {
  std::vector<RmsNormSpec> specs;
  for (const Config& c : kConfigs)
    for (std::int64_t C : kSizes) specs.push_back({C, 1e-5f, c.io, c.out, c.residual});
  return specs;
}

TEST(CodegenRmsNorm, GeneratedMatchesReference) {
  const Options o = testing::test_options();
  std::string why;
  const bool cc = testing::have_compiler(&why);
  // Compile every kernel of the sweep at once (o.workers in parallel), then test each.
  std::vector<GeneratedSource> sources;
  for (const auto& s : all_specs()) sources.push_back(generate_rmsnorm(s, default_rmsnorm_variant()));
  load_kernels(sources, o);
  for (const auto& s : all_specs()) {
    const RmsNormKernel k = RmsNormKernel::get(s, o);
    if (cc) {
      EXPECT_TRUE(k.generated()) << s.to_string() << ": " << k.why_generic();
    } else {
      EXPECT_FALSE(k.generated()) << "no compiler (" << why << "), yet " << s.to_string() << " was generated";
    }
    for (std::int64_t N : {1, 5}) check_kernel(k, N, static_cast<unsigned>(s.hidden * 31 + N));
  }
}

TEST(CodegenRmsNorm, VariantsMatchReference) {
  const Options o = testing::test_options();
  const bool cc = testing::have_compiler();
  for (RmsNormVariant v : {RmsNormVariant{4, 1}, RmsNormVariant{8, 3}, RmsNormVariant{16, 8}})
    for (std::int64_t C : {63, 65, 4097})
      for (const Config& c : {kConfigs[1], kConfigs[3]}) {
        const RmsNormKernel k = RmsNormKernel::get({C, 1e-6f, c.io, c.out, c.residual}, o, &v);
        EXPECT_EQ(k.generated(), cc) << k.why_generic();
        check_kernel(k, 3, static_cast<unsigned>(C + v.unroll));
      }
}

TEST(CodegenRmsNorm, GenericMatchesReference) {
  for (const auto& s : all_specs())
    for (std::int64_t N : {0, 1, 5}) {
      if (N == 0) {
        const RmsNormKernel k = RmsNormKernel::generic(s);
        k.forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0);  // no rows: touches nothing
        continue;
      }
      check_kernel(RmsNormKernel::generic(s), N, static_cast<unsigned>(s.hidden + N));
    }
}

TEST(CodegenRmsNorm, ManyRowsAcrossThreads) {
  const Options o = testing::test_options();
  check_kernel(RmsNormKernel::get({65, 1e-5f, DType::bf16, DType::bf16, true}, o), 301, 7);
  check_kernel(RmsNormKernel::get({64, 1e-5f, DType::f32, DType::f32, false}, o), 1000, 8);
}

// The caller runs the generic kernel while the generated one compiles, then switches; both are right.
TEST(CodegenRmsNorm, AsyncCompileWhileTheGenericKernelRuns) {
  testing::TempDir dir;
  const Options o = testing::test_options(dir.path());
  const RmsNormSpec s{65, 1e-5f, DType::bf16, DType::bf16, true};
  auto pending = RmsNormKernel::get_async(s, o);
  RmsNormKernel k = RmsNormKernel::generic(s);
  while (pending.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) check_kernel(k, 3, 11);
  k = pending.get();
  EXPECT_EQ(k.generated(), testing::have_compiler()) << k.why_generic();
  check_kernel(k, 3, 12);
  EXPECT_THROW(RmsNormKernel::get_async({0, 1e-5f}, o), Error);
  auto g = GemmKernel::get_async({16, 8, true, false, Act::silu, false, false}, 32, o);
  EXPECT_EQ(g.get().generated(), testing::have_compiler());
}

// Autotuning as the GEMM's: every candidate compiled and timed in a child, one record with the winner
// and every time, the record reused, LMCORE_AUTOTUNE=0 (autotune off) gives the default; the tuned
// kernel is checked against the reference like any other.
TEST(CodegenRmsNorm, AutotunePicksAndRecordsAWinner) {
  testing::TempDir dir;
  Options o = testing::test_options(dir.path());
  o.autotune = true;
  // A spec no other test loads (this process reuses a library it loaded under the same key).
  const RmsNormSpec s{67, 1e-5f, DType::bf16, DType::bf16, true};
  const RmsNormKernel k = RmsNormKernel::get(s, o);
  if (!testing::have_compiler()) {
    EXPECT_FALSE(k.generated());
    return;
  }
  ASSERT_TRUE(k.generated()) << k.why_generic();
  check_kernel(k, 37, 21);
  KernelCache cache(o.cache_dir, o.cache_max_bytes);
  std::vector<std::string> names;
  for (const auto& v : rmsnorm_candidates()) names.push_back(v.to_string());
  testing::expect_one_tuning_record(dir.path(), cache, k.variant(), names);
  EXPECT_EQ(cache.list().size(), rmsnorm_candidates().size()) << "every candidate compiled and cached";
  EXPECT_EQ(RmsNormKernel::get(s, o).variant(), k.variant());
  EXPECT_EQ(cache.list().size(), rmsnorm_candidates().size()) << "the record reused: nothing compiled again";
  o.autotune = false;
  EXPECT_EQ(RmsNormKernel::get(s, o).variant(), default_rmsnorm_variant().to_string());
  EXPECT_EQ(parse_rmsnorm_variant(k.variant()).to_string(), k.variant());
  EXPECT_THROW(parse_rmsnorm_variant("W=16 U=4x"), Error);
}

TEST(CodegenRmsNorm, NanAndInfinityPropagate) {
  const Options o = testing::test_options();
  const RmsNormSpec s{7, 1e-5f, DType::bf16, DType::bf16, false};
  for (const RmsNormKernel& k : {RmsNormKernel::get(s, o), RmsNormKernel::generic(s)}) {
    std::vector<std::uint16_t> inp(7, reference::to_bf16(1.0)), out(7);
    inp[3] = 0x7fc1;  // a NaN
    std::vector<float> w(7, 1.0f), rstd(1);
    k.forward(out.data(), rstd.data(), inp.data(), nullptr, nullptr, w.data(), 1);
    EXPECT_TRUE(std::isnan(rstd[0])) << k.variant();
    for (auto b : out) EXPECT_EQ(b, 0xffff) << k.variant() << ": NaN is stored as 0xFFFF as torch does";
  }
}

// With x = 1 and eps = 0, rstd is exactly 1 and out = w: each bf16 output must carry exactly the bits of
// w rounded to nearest even. The weights put ties, values that round up to infinity, subnormals (alone
// among normal lanes, and a whole vector of them), NaN, infinities and -0 in the lanes; the kernels that
// use the CPU's bf16 conversion (which flushes subnormals) must still give these bits.
TEST(CodegenRmsNorm, Bf16OutputIsRoundedToNearestEvenForEveryKindOfValue) {
  const Options o = testing::test_options();
  const std::int64_t C = 64, N = 20;
  auto f = [](std::uint32_t bits) { float v; std::memcpy(&v, &bits, 4); return v; };
  std::vector<float> w(static_cast<std::size_t>(C));
  const std::uint32_t normal[] = {0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0xbf808000, 0xbf818000,
                                  0x7f7fffff, 0xff7fffff, 0x42c4c000, 0x3e2aaaab, 0x00800000, 0x7f7f8000,
                                  0x7f7f7fff, 0xc1234567, 0x3c23d70a, 0x40490fdb};
  const std::uint32_t subnormal[] = {0x00000001, 0x00008000, 0x00018000, 0x007fffff, 0x80008001, 0x0000c000,
                                     0x00400000, 0x807f8000};
  for (std::int64_t i = 0; i < 16; ++i) w[i] = f(normal[i]);                         // ties, round to inf
  for (std::int64_t i = 16; i < 32; ++i) w[i] = f(normal[(i * 5) % 16]);
  w[21] = f(0x00018000);                                                             // one subnormal lane
  for (std::int64_t i = 32; i < 48; ++i) w[i] = f(subnormal[i % 8]);                // subnormals only
  for (std::int64_t i = 48; i < 64; ++i) w[i] = f(normal[i % 16]);
  w[50] = std::nanf("");
  w[51] = f(0x7fa00001);  // a signalling NaN
  w[52] = INFINITY;
  w[53] = -INFINITY;
  w[54] = -0.0f;
  std::vector<std::uint16_t> want(static_cast<std::size_t>(C));
  for (std::int64_t i = 0; i < C; ++i) want[i] = reference::to_bf16(static_cast<double>(w[i]));
  ASSERT_EQ(want[0], 0x3f80);
  ASSERT_EQ(want[6], 0x7f80);
  ASSERT_EQ(want[21], 0x0002);
  ASSERT_EQ(want[50], 0xffff);

  for (const DType io : {DType::bf16, DType::f32}) {
    const RmsNormSpec s{C, 0.0f, io, DType::bf16, false};
    std::vector<RmsNormKernel> kernels{RmsNormKernel::generic(s)};
    for (RmsNormVariant v : {RmsNormVariant{16, 1}, RmsNormVariant{8, 2}, RmsNormVariant{4, 1}})
      kernels.push_back(RmsNormKernel::get(s, o, &v));
    for (const RmsNormKernel& k : kernels) {
      std::vector<std::uint16_t> inp16(static_cast<std::size_t>(N * C), 0x3f80), out(static_cast<std::size_t>(N * C));
      std::vector<float> inp32(static_cast<std::size_t>(N * C), 1.0f), rstd(static_cast<std::size_t>(N));
      const void* inp = io == DType::bf16 ? static_cast<const void*>(inp16.data()) : inp32.data();
      k.forward(out.data(), rstd.data(), inp, nullptr, nullptr, w.data(), N);
      for (std::int64_t n = 0; n < N; ++n) {
        ASSERT_EQ(rstd[n], 1.0f) << k.variant();
        for (std::int64_t i = 0; i < C; ++i)
          ASSERT_EQ(out[n * C + i], want[i]) << s.to_string() << " variant " << k.variant() << ": row " << n
                                             << " column " << i << " (weight bits " << std::hex
                                             << [&] { std::uint32_t b; std::memcpy(&b, &w[i], 4); return b; }() << ")";
      }
    }
  }
}

TEST(CodegenRmsNorm, BadSpecIsAnError) {
  try {
    RmsNormKernel::get({0, 1e-5f});
    FAIL() << "hidden 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden size must be >= 1, found 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(RmsNormKernel::generic({8, -1.0f}), Error);
  const RmsNormKernel k = RmsNormKernel::generic({8, 1e-5f, DType::f32, DType::f32, true});
  float x[8] = {}, out[8], rstd[1], w[8] = {};
  EXPECT_THROW(k.forward(out, rstd, x, nullptr, nullptr, w, 1), Error);
}

TEST(CodegenReference, Bf16Rounding) {
  EXPECT_EQ(reference::to_bf16(1.0), 0x3f80);
  EXPECT_EQ(reference::to_bf16(1.0 + 1.0 / 256), 0x3f80);              // tie -> even (down)
  EXPECT_EQ(reference::to_bf16(1.0 + 3.0 / 256), 0x3f82);              // tie -> even (up)
  EXPECT_EQ(reference::to_bf16(-2.5), 0xc020);
  EXPECT_EQ(reference::to_bf16(1e39), 0x7f80);
  EXPECT_EQ(reference::to_bf16(std::ldexp(1.0, -133)), 0x0001);      // smallest subnormal
  EXPECT_EQ(reference::to_bf16(std::nan("")), 0xffff);
  for (std::uint32_t b = 0; b < 0x7f80; b += 7) EXPECT_EQ(reference::to_bf16(reference::from_bf16(std::uint16_t(b))), b);
}

}  // namespace
}  // namespace lmcore::codegen
