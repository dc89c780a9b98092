// gemm_f32 on both of its paths (OpenBLAS's sgemm and oneDNN's f32 matmul, each forced in turn)
// against a plain f64 triple loop: transposes, alpha and beta, strided rows, sizes around the
// kernels' blocks, the threaded cut and the single-threaded cases (inside parallel_for, under
// BlasSingleThreaded).
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"

namespace lmcore {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

struct F32Case {
  bool ta, tb;
  std::int64_t m, n, k;
  float alpha, beta;
  std::int64_t pad;  // extra elements per stored row of A, B and C
};

// Stored operands of a case, random in [-1, 1].
struct Operands {
  std::vector<float> a, b, c;
  std::int64_t lda, ldb, ldc;
};

Operands make_operands(const F32Case& t, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Operands o;
  const std::int64_t a_rows = t.ta ? t.k : t.m, a_cols = t.ta ? t.m : t.k;
  const std::int64_t b_rows = t.tb ? t.n : t.k, b_cols = t.tb ? t.k : t.n;
  o.lda = a_cols + t.pad;
  o.ldb = b_cols + t.pad;
  o.ldc = t.n + t.pad;
  o.a.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, a_rows * o.lda)));
  o.b.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, b_rows * o.ldb)));
  o.c.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, t.m * o.ldc)));
  for (auto* v : {&o.a, &o.b, &o.c})
    for (float& x : *v) x = u(rng);
  return o;
}

// Runs gemm_f32 on `o` and checks every element of C against the f64 product: |got - want| <=
// 4 eps (|alpha| sum_k |a b| + |beta c|) + the final rounding, as matmul_test.cpp's f32 bound; the
// padding between rows must be untouched.
void expect_matches_reference(const F32Case& t, Operands o, const std::string& what) {
  const std::vector<float> c0 = o.c;
  gemm_f32(t.ta, t.tb, t.m, t.n, t.k, t.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, t.beta, o.c.data(), o.ldc);
  int bad = 0;
  for (std::int64_t i = 0; i < t.m; ++i) {
    for (std::int64_t j = 0; j < o.ldc; ++j) {
      const std::size_t at = static_cast<std::size_t>(i * o.ldc + j);
      if (j >= t.n) {
        EXPECT_EQ(o.c[at], c0[at]) << what << ": padding of C written at (" << i << ", " << j << ")";
        continue;
      }
      double want = 0, terms = 0;
      for (std::int64_t p = 0; p < t.k; ++p) {
        const double x = o.a[static_cast<std::size_t>(t.ta ? p * o.lda + i : i * o.lda + p)];
        const double y = o.b[static_cast<std::size_t>(t.tb ? j * o.ldb + p : p * o.ldb + j)];
        want += x * y;
        terms += std::abs(x * y);
      }
      const double scaled_c = t.beta == 0.0f ? 0.0 : t.beta * static_cast<double>(c0[at]);  // C unread at beta 0
      want = t.alpha * want + scaled_c;
      const double bound = 4 * kEps * (std::abs(t.alpha) * terms + std::abs(scaled_c)) + kEps / 2 * std::abs(want);
      if (!(std::abs(o.c[at] - want) <= bound) && bad++ < 3)
        ADD_FAILURE() << what << ": C(" << i << ", " << j << ") = " << o.c[at] << ", expected " << want << " within "
                      << bound;
    }
  }
}

class GemmF32 : public ::testing::TestWithParam<F32GemmPath> {
 protected:
  void SetUp() override { set_f32_gemm_path(GetParam()); }
  void TearDown() override { set_f32_gemm_path(std::nullopt); }
};

std::string case_name(const F32Case& t) {
  return fmt::format("ta={} tb={} m={} n={} k={} alpha={} beta={} pad={}", t.ta, t.tb, t.m, t.n, t.k, t.alpha, t.beta,
                     t.pad);
}

TEST_P(GemmF32, EveryTransposeScaleAndStride) {
  ASSERT_EQ(f32_gemm_path(), GetParam());
  std::uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-0.5f, 1.0f}, std::pair{2.0f, 0.25f}})
        for (std::int64_t pad : {0, 3}) {
          const F32Case t{ta, tb, 37, 29, 45, alpha, beta, pad};
          expect_matches_reference(t, make_operands(t, seed++), case_name(t));
        }
}

TEST_P(GemmF32, SizesAroundTheKernelBlocks) {
  std::uint32_t seed = 100;
  for (std::int64_t m : {1, 7, 17, 65})
    for (std::int64_t n : {1, 15, 64, 130})
      for (std::int64_t k : {1, 16, 67}) {
        const F32Case t{false, true, m, n, k, 1.0f, 0.0f, 0};
        expect_matches_reference(t, make_operands(t, seed++), case_name(t));
      }
}

// Large enough to be cut over the pool (oneDNN: lmcore's threads); then the same product inside a
// parallel_for body and under BlasSingleThreaded, which run on the calling thread.
TEST_P(GemmF32, ThreadedAndSingleThreaded) {
  const F32Case rows{false, false, 300, 257, 129, 1.0f, 0.5f, 1}, cols{false, true, 40, 1100, 96, 1.0f, 0.0f, 0};
  expect_matches_reference(rows, make_operands(rows, 7), "threaded by rows " + case_name(rows));
  expect_matches_reference(cols, make_operands(cols, 8), "threaded by columns " + case_name(cols));
  parallel_for(0, 2, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i)
      expect_matches_reference(rows, make_operands(rows, 9 + static_cast<std::uint32_t>(i)), "inside parallel_for");
  });
  const BlasSingleThreaded guard;
  expect_matches_reference(rows, make_operands(rows, 11), "under BlasSingleThreaded");
}

TEST_P(GemmF32, BetaZeroOverwritesNaNAndKZeroScales) {
  F32Case t{false, false, 5, 6, 7, 1.0f, 0.0f, 0};
  Operands o = make_operands(t, 3);
  std::fill(o.c.begin(), o.c.end(), std::numeric_limits<float>::quiet_NaN());
  expect_matches_reference(t, o, "beta 0, C all NaN");
  t.k = 0;
  t.beta = 0.5f;
  expect_matches_reference(t, make_operands(t, 4), "k = 0 scales C by beta");
  t.m = 0;
  expect_matches_reference(t, make_operands(t, 5), "m = 0");
}
// Where a signal's handler runs while a product is under way (lmcore/core/deferred_signals.h: oneDNN's
// jit sgemm runs with the stack pointer in a heap workspace, and a signal's frame landing there
// corrupted the heap). Every handler must run on the thread's own stack, and the signals must still
// arrive. Without the deferral this test dies of "corrupted size vs. prev_size" on the oneDNN path.
thread_local std::uintptr_t t_stack_lo = 0, t_stack_hi = 0;  // set by the thread that multiplies
std::atomic<int> g_handled{0}, g_handled_off_stack{0};

extern "C" void note_where_the_handler_runs(int) {
  if (t_stack_hi == 0) return;  // another thread
  const auto frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  g_handled.fetch_add(1);
  if (frame < t_stack_lo || frame >= t_stack_hi) g_handled_off_stack.fetch_add(1);
}

TEST_P(GemmF32, SignalsDuringAProductAreHandledOnTheThreadsOwnStack) {
  struct sigaction sa {}, old {};
  sa.sa_handler = note_where_the_handler_runs;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_handled = 0;
  g_handled_off_stack = 0;
  // Strided rows and no transpose: oneDNN takes its jit sgemm ("gemm:jit", no copy of the operands);
  // K = 512 is past what that kernel packs on its stack with AVX-512 (84) or AVX2 (252).
  const F32Case t{false, false, 128, 128, 512, 1.0f, 0.0f, 3};
  Operands o = make_operands(t, 21);
  std::atomic<bool> started{false}, done{false};
  std::thread worker([&] {
    pthread_attr_t attr;
    void* lo = nullptr;
    std::size_t size = 0;
    const bool found = pthread_getattr_np(pthread_self(), &attr) == 0;
    if (!found || pthread_attr_getstack(&attr, &lo, &size) != 0) {
      ADD_FAILURE() << "could not read the thread's stack bounds";
      started = done = true;
      return;
    }
    pthread_attr_destroy(&attr);
    t_stack_lo = reinterpret_cast<std::uintptr_t>(lo);
    t_stack_hi = t_stack_lo + size;
    const BlasSingleThreaded guard;  // the product runs on this thread
    started = true;
    for (int i = 0; i < 1500; ++i)
      gemm_f32(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, o.c.data(), o.ldc);
    t_stack_hi = 0;
    done = true;
  });
  while (!started) std::this_thread::yield();
  int sent = 0;
  for (; !done; ++sent) {
    pthread_kill(worker.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  worker.join();
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_GE(g_handled.load(), 100) << "signals sent: " << sent;  // enough landed inside products
  EXPECT_EQ(g_handled_off_stack.load(), 0) << "of " << g_handled.load() << " handled";
  expect_matches_reference(t, make_operands(t, 21), "after the signals");
}


INSTANTIATE_TEST_SUITE_P(Paths, GemmF32, ::testing::Values(F32GemmPath::openblas, F32GemmPath::onednn),
                         [](const auto& info) { return info.param == F32GemmPath::onednn ? "onednn" : "openblas"; });

TEST(GemmF32Path, TheRuleAndTheOverrideAreReported) {
  set_f32_gemm_path(F32GemmPath::onednn);
  EXPECT_NE(f32_gemm_path_description().find("oneDNN"), std::string::npos) << f32_gemm_path_description();
  set_f32_gemm_path(F32GemmPath::openblas);
  EXPECT_NE(f32_gemm_path_description().find("OpenBLAS"), std::string::npos) << f32_gemm_path_description();
  set_f32_gemm_path(std::nullopt);
  // The rule: oneDNN exactly when its kernels here use AVX-512 and OpenBLAS's do not.
  const std::string d = f32_gemm_path_description();
  EXPECT_EQ(f32_gemm_path() == F32GemmPath::onednn, d.rfind("oneDNN", 0) == 0) << d;
  if (!onednn_has_avx512()) {
    EXPECT_EQ(f32_gemm_path(), F32GemmPath::openblas) << d;
  }
}

}  // namespace
}  // namespace lmcore
