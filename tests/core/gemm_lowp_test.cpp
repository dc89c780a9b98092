// gemm_lowp against its f64 reference, on both paths (oneDNN where this CPU has it, and the widened
// f32 sgemm), every transpose, f32 and low-precision C, alpha/beta, padded leading dimensions, the
// threaded cut, calls from inside parallel_for and from several threads at once.
//
// Bound for one element of C, with S = |alpha| * sum_t |a_it * b_tj| + |beta * c_ij| and u = 2^-24:
//   f32 C:        (k + 3) * u * S                  (products are exact in f32; one rounding per add,
//                                                   plus alpha, beta and the reference's own f32 store)
//   bf16/f16 C:   the same + u_out * |C_exact|       (one rounding of the result, u_out = 2^-8 / 2^-11)
// A 1% error in any element exceeds it by far; the tests also print the largest error / bound seen.
#include "lmcore/core/gemm_lowp.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "lmcore/core/error.h"
#include "lmcore/core/low_precision.h"
#include "lmcore/core/parallel.h"

namespace lmcore {
namespace {

// A matrix of bf16/f16/f32 elements held as raw bits, with helpers to read it as double.
struct Buf {
  DType dt;
  std::vector<std::uint32_t> words;  // f32 uses all 32 bits; 16-bit types live in a uint16 view
  std::vector<std::uint16_t> halves;
  void* data() { return dt == DType::f32 ? static_cast<void*>(words.data()) : static_cast<void*>(halves.data()); }
  const void* data() const { return const_cast<Buf*>(this)->data(); }
  double at(std::int64_t i) const {
    switch (dt) {
      case DType::f32: return std::bit_cast<float>(words[static_cast<std::size_t>(i)]);
      case DType::bf16: return bf16::from_bits(halves[static_cast<std::size_t>(i)]).to_f32();
      default: return f16::from_bits(halves[static_cast<std::size_t>(i)]).to_f32();
    }
  }
};

// n elements uniform in [-1, 1) rounded to dt; padding elements hold NaN so a read of them shows.
Buf random_buf(DType dt, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::uint32_t seed) {
  Buf b{dt, {}, {}};
  const std::size_t n = static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * ld);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  if (dt == DType::f32) b.words.assign(n, std::bit_cast<std::uint32_t>(std::nanf("")));
  else b.halves.assign(n, dt == DType::bf16 ? 0x7FC0 : 0x7E00);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = dist(gen);
      const auto i = static_cast<std::size_t>(r * ld + c);
      if (dt == DType::f32) b.words[i] = std::bit_cast<std::uint32_t>(v);
      else if (dt == DType::bf16) b.halves[i] = bf16::from_f32(v).bits;
      else b.halves[i] = f16::from_f32(v).bits;
    }
  return b;
}

double unit_roundoff(DType dt) { return dt == DType::bf16 ? 0x1p-8 : dt == DType::f16 ? 0x1p-11 : 0.0; }

struct Case {
  DType ab, c;
  bool ta, tb;
  std::int64_t m, n, k;
  float alpha, beta;
  std::int64_t pad = 0;  // added to every leading dimension
};

std::string describe(const Case& t) {
  return fmt::format("ab={} c={} ta={} tb={} m={} n={} k={} alpha={} beta={} pad={} path={}", t.ab, t.c, t.ta, t.tb,
                     t.m, t.n, t.k, t.alpha, t.beta, t.pad,
                     lowp_gemm_path(t.ab) == LowpGemmPath::onednn ? "onednn" : "widened");
}

// Runs one case through gemm_lowp and checks every element against the bound; returns the largest
// error / bound ratio.
double check_case(const Case& t, std::uint32_t seed) {
  const std::int64_t a_rows = t.ta ? t.k : t.m, a_cols = t.ta ? t.m : t.k;
  const std::int64_t b_rows = t.tb ? t.n : t.k, b_cols = t.tb ? t.k : t.n;
  const std::int64_t lda = std::max<std::int64_t>(a_cols, 1) + t.pad, ldb = std::max<std::int64_t>(b_cols, 1) + t.pad;
  const std::int64_t ldc = std::max<std::int64_t>(t.n, 1) + t.pad;
  const Buf a = random_buf(t.ab, a_rows, a_cols, lda, seed);
  const Buf b = random_buf(t.ab, b_rows, b_cols, ldb, seed + 1);
  const Buf c0 = random_buf(t.c, t.m, t.n, ldc, seed + 2);
  Buf got = c0, exact = random_buf(DType::f32, t.m, t.n, ldc, seed + 2);
  // The reference writes an f32 C (its f64 sum rounded once to f32) from the same starting C values.
  for (std::int64_t i = 0; i < t.m; ++i)
    for (std::int64_t j = 0; j < t.n; ++j)
      exact.words[static_cast<std::size_t>(i * ldc + j)] = std::bit_cast<std::uint32_t>(static_cast<float>(c0.at(i * ldc + j)));
  gemm_lowp(t.ab, t.c, t.ta, t.tb, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, got.data(), ldc);
  // The reference's C is f32 for the exact value (c_dtype f32 is always allowed).
  gemm_lowp_reference(t.ab, DType::f32, t.ta, t.tb, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta,
                      exact.data(), ldc);
  // |op(A)| by rows and |op(B)| by columns, read once: the bound's sums run over plain arrays.
  std::vector<double> abs_rows(static_cast<std::size_t>(t.m * t.k)), abs_cols(static_cast<std::size_t>(t.n * t.k));
  for (std::int64_t i = 0; i < t.m; ++i)
    for (std::int64_t p = 0; p < t.k; ++p)
      abs_rows[static_cast<std::size_t>(i * t.k + p)] = std::abs(a.at(t.ta ? p * lda + i : i * lda + p));
  for (std::int64_t j = 0; j < t.n; ++j)
    for (std::int64_t p = 0; p < t.k; ++p)
      abs_cols[static_cast<std::size_t>(j * t.k + p)] = std::abs(b.at(t.tb ? j * ldb + p : p * ldb + j));
  double worst = 0;
  int reported = 0;
  for (std::int64_t i = 0; i < t.m; ++i)
    for (std::int64_t j = 0; j < t.n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < t.k; ++p)
        s += abs_rows[static_cast<std::size_t>(i * t.k + p)] * abs_cols[static_cast<std::size_t>(j * t.k + p)];
      s = std::abs(t.alpha) * s + (t.beta != 0.0f ? std::abs(t.beta * c0.at(i * ldc + j)) : 0.0);
      const double want = exact.at(i * ldc + j), have = got.at(i * ldc + j);
      const double bound = static_cast<double>(t.k + 3) * 0x1p-24 * s + unit_roundoff(t.c) * std::abs(want);
      const double err = std::abs(have - want);
      if (!(err <= bound) && reported++ < 3)
        ADD_FAILURE() << describe(t) << ": C[" << i << ", " << j << "] = " << have << ", reference " << want
                      << ", error " << err << " > bound " << bound;
      if (bound > 0) worst = std::max(worst, err / bound);
    }
  // Padding of C is never written.
  for (std::int64_t i = 0; i < t.m; ++i)
    for (std::int64_t j = t.n; j < ldc; ++j)
      if (!std::isnan(got.at(i * ldc + j)) && reported++ < 3) ADD_FAILURE() << describe(t) << ": wrote C padding at " << i << ", " << j;
  return worst;
}

// Runs `fn` once with oneDNN allowed (where the CPU has it) and once forced onto the widened path.
template <typename Fn>
void on_both_paths(Fn fn) {
  for (bool onednn : {true, false}) {
    set_lowp_gemm_onednn(onednn);
    fn(onednn);
  }
  set_lowp_gemm_onednn(true);
}

TEST(GemmLowp, PathsAreReportedAndForcible) {
  set_lowp_gemm_onednn(false);
  EXPECT_EQ(lowp_gemm_path(DType::bf16), LowpGemmPath::widened);
  EXPECT_NE(lowp_gemm_path_description(DType::bf16).find("set_lowp_gemm_onednn(false)"), std::string::npos)
      << lowp_gemm_path_description(DType::bf16);
  set_lowp_gemm_onednn(true);
  EXPECT_EQ(lowp_gemm_path(DType::f16), LowpGemmPath::widened);  // oneDNN 2.6: no f16 CPU matmul
  const bool env_off = std::getenv("LMCORE_ONEDNN") != nullptr && std::string(std::getenv("LMCORE_ONEDNN")) == "0";
  if (env_off) {
    EXPECT_EQ(lowp_gemm_path(DType::bf16), LowpGemmPath::widened);
  }
  std::printf("[          ] oneDNN %s; bf16: %s; f16: %s\n", onednn_info().c_str(),
              lowp_gemm_path_description(DType::bf16).c_str(), lowp_gemm_path_description(DType::f16).c_str());
}

TEST(GemmLowp, EveryTransposeDTypeAndScaleOnBothPaths) {
  std::uint32_t seed = 10;
  on_both_paths([&](bool) {
    double worst = 0;
    for (DType ab : {DType::bf16, DType::f16})
      for (DType c : {DType::f32, ab})
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.0f, 1.0f}, std::pair{0.125f, 0.5f}})
              for (std::int64_t pad : {0, 5})
                worst = std::max(worst, check_case({ab, c, ta, tb, 37, 50, 72, alpha, beta, pad}, seed += 3));
    std::printf("[          ] path %s: largest error / bound %.3f\n",
                lowp_gemm_path(DType::bf16) == LowpGemmPath::onednn ? "onednn" : "widened", worst);
  });
}

TEST(GemmLowp, AwkwardSizes) {
  std::uint32_t seed = 1000;
  on_both_paths([&](bool) {
    for (std::int64_t m : {1, 2, 15, 16, 17, 33})
      for (std::int64_t n : {1, 3, 16, 31, 65})
        for (std::int64_t k : {1, 2, 31, 32, 33, 130})
          check_case({DType::bf16, DType::f32, (m + n) % 2 == 1, k % 2 == 0, m, n, k, 1.0f, 1.0f, (m % 3) * 2},
                     seed += 3);
  });
}

TEST(GemmLowp, ThreadedCutByRowsAndByColumns) {
  const int saved = num_threads();
  set_num_threads(3);
  std::uint32_t seed = 5000;
  on_both_paths([&](bool) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_case({DType::bf16, DType::bf16, ta, tb, 301, 160, 96, 1.0f, 1.0f, 3}, seed += 3);  // rows
        check_case({DType::bf16, DType::f32, ta, tb, 9, 1100, 256, 1.0f, 0.0f, 0}, seed += 3);   // columns
        check_case({DType::f16, DType::f32, ta, tb, 200, 130, 80, 1.0f, 0.0f, 0}, seed += 3);
      }
  });
  set_num_threads(saved);
}

// Long K against few rows per thread: the threads take slices of K into f32 partials and then add
// them into C (alpha, beta and the rounding to C's dtype applied once, after the sum). On the widened
// path always; on oneDNN where the CPU has no AMX (see cut_k_pays).
TEST(GemmLowp, ThreadedCutByK) {
  const int saved = num_threads();
  std::uint32_t seed = 7000;
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    on_both_paths([&](bool) {
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          check_case({DType::bf16, DType::bf16, ta, tb, 40, 70, 4100, 1.0f, 1.0f, 3}, seed += 3);
          check_case({DType::bf16, DType::f32, ta, tb, 33, 64, 4096, 0.25f, 0.0f, 0}, seed += 3);
          check_case({DType::f16, DType::f16, ta, tb, 48, 17, 4160, 1.0f, 0.5f, 1}, seed += 3);
        }
    });
  }
  set_num_threads(saved);
}

TEST(GemmLowp, TilesFromInsideParallelForAndFromManyThreads) {
  // Tiles of one product, each from a pool worker (single-threaded inside): C = A @ B^T.
  const std::int64_t tiles = 8, m = 48, n = 40, k = 64;
  std::vector<double> worst(tiles, 0.0);
  parallel_for(0, tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t)
      worst[static_cast<std::size_t>(t)] =
          check_case({DType::bf16, DType::f32, false, true, m + t, n, k, 0.5f, 0.0f, t % 2}, 9000 + static_cast<std::uint32_t>(t));
  });
  // Plain threads sharing the primitive cache, with overlapping shapes.
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([i, &done] {
      for (int r = 0; r < 3; ++r)
        check_case({DType::bf16, i % 2 ? DType::bf16 : DType::f32, false, r % 2 == 1, 20 + i % 2, 30, 40, 1.0f, 1.0f, 0},
                   static_cast<std::uint32_t>(9500 + 10 * i + r));
      done.fetch_add(1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), 4);
}

TEST(GemmLowp, DegenerateSizesAndBetaZeroIgnoresNaN) {
  on_both_paths([&](bool) {
    // k == 0: C = beta * C.
    std::vector<float> c{1, 2, 3, 4};
    gemm_lowp(DType::bf16, DType::f32, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
    EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
    gemm_lowp(DType::bf16, DType::f32, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
    EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
    // m == 0 / n == 0: nothing is touched.
    gemm_lowp(DType::bf16, DType::f32, false, false, 0, 2, 3, 1.0f, nullptr, 3, nullptr, 2, 0.0f, nullptr, 2);
    // beta == 0 never reads C: NaN in C is overwritten.
    const std::uint16_t one = bf16::from_f32(1.0f).bits;
    std::vector<std::uint16_t> a(6, one), b(6, one);
    std::vector<float> out(4, std::nanf(""));
    gemm_lowp(DType::bf16, DType::f32, false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f, out.data(), 2);
    EXPECT_EQ(out, (std::vector<float>{3, 3, 3, 3}));
  });
}

TEST(GemmLowp, BadArgumentsNameTheArgument) {
  std::vector<std::uint16_t> a(64), b(64);
  std::vector<float> c(64);
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { gemm_lowp(DType::f32, DType::f32, false, false, 2, 2, 2, 1, a.data(), 2, b.data(), 2, 0, c.data(), 2); })
                .find("'ab'"),
            std::string::npos);
  EXPECT_NE(message([&] { gemm_lowp(DType::bf16, DType::f16, false, false, 2, 2, 2, 1, a.data(), 2, b.data(), 2, 0, c.data(), 2); })
                .find("'c_dtype'"),
            std::string::npos);
  EXPECT_NE(message([&] { gemm_lowp(DType::bf16, DType::f32, false, false, 2, 2, 4, 1, a.data(), 3, b.data(), 2, 0, c.data(), 2); })
                .find("'lda' = 3"),
            std::string::npos);
  EXPECT_NE(message([&] { gemm_lowp(DType::bf16, DType::f32, false, true, 2, 5, 4, 1, a.data(), 4, b.data(), 3, 0, c.data(), 5); })
                .find("'ldb' = 3"),
            std::string::npos);
  EXPECT_NE(message([&] { gemm_lowp(DType::bf16, DType::f32, false, false, 2, 5, 4, 1, a.data(), 4, b.data(), 5, 0, c.data(), 4); })
                .find("'ldc' = 4"),
            std::string::npos);
  EXPECT_NE(message([&] { gemm_lowp(DType::bf16, DType::f32, false, false, -1, 5, 4, 1, a.data(), 4, b.data(), 5, 0, c.data(), 5); })
                .find("m = -1"),
            std::string::npos);
}

}  // namespace
}  // namespace lmcore
