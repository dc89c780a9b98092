#include "lmcore/core/matmul.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <mutex>
#include <string>

#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/parallel.h"

namespace lmcore {

namespace {
std::mutex g_blas_mutex;
int g_blas_guards = 0;
int g_blas_saved = 1;
}  // namespace

BlasSingleThreaded::BlasSingleThreaded() {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  if (g_blas_guards++ == 0) {
    g_blas_saved = openblas_get_num_threads();
    if (g_blas_saved != 1) openblas_set_num_threads(1);
  }
}

BlasSingleThreaded::~BlasSingleThreaded() {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  if (--g_blas_guards == 0 && g_blas_saved != 1) openblas_set_num_threads(g_blas_saved);
}

namespace {

// OpenBLAS's sgemm kernels for these cores use AVX-512 (the names openblas_get_corename reports).
bool openblas_core_has_avx512() {
  const std::string name = openblas_get_corename();
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"})
    if (std::equal(name.begin(), name.end(), avx512, avx512 + std::strlen(avx512),
                   [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == y; }))
      return true;
  return false;
}

bool f32_rule_picks_onednn() {
  static const bool onednn = onednn_has_avx512() && !openblas_core_has_avx512();
  return onednn;
}

// -1: the rule; else a forced F32GemmPath.
std::atomic<int> g_f32_forced{-1};

}  // namespace

F32GemmPath f32_gemm_path() {
  const int forced = g_f32_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<F32GemmPath>(forced);
  return f32_rule_picks_onednn() ? F32GemmPath::onednn : F32GemmPath::openblas;
}

void set_f32_gemm_path(std::optional<F32GemmPath> path) {
  g_f32_forced.store(path ? static_cast<int>(*path) : -1, std::memory_order_relaxed);
}

std::string f32_gemm_path_description() {
  const std::string core = openblas_get_corename();
  if (g_f32_forced.load() >= 0)
    return f32_gemm_path() == F32GemmPath::onednn ? "oneDNN matmul (forced by set_f32_gemm_path)"
                                                  : fmt::format("OpenBLAS sgemm, {} kernel (forced by set_f32_gemm_path)", core);
  if (f32_gemm_path() == F32GemmPath::onednn)
    return fmt::format("oneDNN matmul (OpenBLAS's {} kernel has no AVX-512; oneDNN's has)", core);
  if (openblas_core_has_avx512()) return fmt::format("OpenBLAS sgemm, {} kernel (AVX-512)", core);
  return fmt::format("OpenBLAS sgemm, {} kernel (oneDNN without AVX-512 here, or LMCORE_ONEDNN=0)", core);
}

void gemm_f32(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
              const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
              std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (f32_gemm_path() == F32GemmPath::onednn) {
    // Cut over the pool only where cblas_sgemm would thread itself: outside parallel_for bodies (the
    // common case for attention and loss tiles, checked first: no lock) and BlasSingleThreaded.
    const bool may_split = !in_parallel_region() && [] {
      std::lock_guard<std::mutex> lock(g_blas_mutex);
      return g_blas_guards == 0;
    }();
    gemm_f32_onednn(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, may_split);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void gemm_f64(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
              const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
              std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

namespace {

struct MatmulPlan {
  Shape batch;     // broadcast batch shape
  Tensor a, b;     // expanded to batch + [M, K] / batch + [K, N]
  std::int64_t m, n, k;
  bool squeeze_m = false, squeeze_n = false;
};

MatmulPlan plan(const Tensor& a_in, const Tensor& b_in, const char* op) {
  LMCORE_CHECK(a_in.defined() && b_in.defined(), "{}: operands must be defined", op);
  LMCORE_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "{}: operands must have at least 1 dim, found {} and {}", op,
               a_in.dim(), b_in.dim());
  LMCORE_CHECK(a_in.dtype() == b_in.dtype(), "{}: operands must have the same dtype, found {} and {}", op,
               a_in.dtype(), b_in.dtype());
  const DType dt = a_in.dtype();
  LMCORE_CHECK(dt == DType::f32 || dt == DType::f64 || dt == DType::bf16 || dt == DType::f16,
               "{}: expected dtype f32, f64, bf16 or f16, found {}", op, dt);
  MatmulPlan p;
  Tensor a = a_in, b = b_in;
  if (a.dim() == 1) { a = a.unsqueeze(0); p.squeeze_m = true; }
  if (b.dim() == 1) { b = b.unsqueeze(1); p.squeeze_n = true; }
  p.m = a.size(-2);
  p.k = a.size(-1);
  p.n = b.size(-1);
  LMCORE_CHECK(b.size(-2) == p.k, "{}: inner dimensions differ: a is {} and b is {} ({} vs {})", op,
               shape_str(a_in.shape()), shape_str(b_in.shape()), p.k, b.size(-2));
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  p.batch = broadcast_shapes(ab, bb, op);
  Shape ea = p.batch, eb = p.batch;
  ea.insert(ea.end(), {p.m, p.k});
  eb.insert(eb.end(), {p.k, p.n});
  p.a = a.expand(ea);
  p.b = b.expand(eb);
  return p;
}

// Makes a 2-D f32/f64 matrix usable by BLAS: returns (tensor, transposed, leading dim).
struct BlasOperand {
  Tensor t;
  bool trans;
  std::int64_t ld;
};

BlasOperand blas_operand(const Tensor& x) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (x.stride(1) == 1 && x.stride(0) >= std::max<std::int64_t>(cols, 1)) return {x, false, x.stride(0)};
  if (x.stride(0) == 1 && x.stride(1) >= std::max<std::int64_t>(rows, 1)) return {x, true, x.stride(1)};
  Tensor c = x.clone();
  return {c, false, std::max<std::int64_t>(cols, 1)};
}

Shape output_shape(const MatmulPlan& p) {
  Shape out = p.batch;
  if (!p.squeeze_m) out.push_back(p.m);
  if (!p.squeeze_n) out.push_back(p.n);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  MatmulPlan p = plan(a_in, b_in, "matmul");
  const DType dt = a_in.dtype();
  const bool lowp = dt == DType::bf16 || dt == DType::f16;
  const DType compute = dt == DType::f64 ? DType::f64 : lowp ? dt : DType::f32;
  Shape full = p.batch;
  full.insert(full.end(), {p.m, p.n});
  Tensor out = Tensor::empty(full, compute);
  const std::int64_t batches = checked_numel(p.batch, "matmul");
  const Tensor& a = p.a;
  const Tensor& b = p.b;
  const Tensor out3 = out.view({batches, p.m, p.n});
  auto batch_view = [&](const Tensor& x, std::int64_t i) {
    // Index the broadcast batch dims of x with flat batch index i.
    Tensor v = x;
    std::int64_t rem = i;
    for (std::int64_t d = static_cast<std::int64_t>(p.batch.size()) - 1; d >= 0; --d) {
      const std::int64_t idx = rem % p.batch[d];
      rem /= p.batch[d];
      v = v.select(d, idx);
    }
    return v;
  };
  // Batches run one after another: each sgemm already uses every BLAS thread.
  for (std::int64_t i = 0; i < batches; ++i) {
    const BlasOperand A = blas_operand(batch_view(a, i));
    const BlasOperand B = blas_operand(batch_view(b, i));
    const Tensor C = out3.select(0, i);
    if (lowp) {
      // f32 accumulation, C rounded once (gemm_lowp: oneDNN on the matrix units, or widened sgemm).
      gemm_lowp(dt, dt, A.trans, B.trans, p.m, p.n, p.k, 1.0f, A.t.data_ptr(), A.ld, B.t.data_ptr(), B.ld, 0.0f,
                C.data_ptr(), std::max<std::int64_t>(p.n, 1));
    } else if (compute == DType::f32) {
      if (p.k == 0) { Tensor c = C; c.zero_(); continue; }
      gemm_f32(A.trans, B.trans, p.m, p.n, p.k, 1.0f, static_cast<const float*>(A.t.data_ptr()), A.ld,
               static_cast<const float*>(B.t.data_ptr()), B.ld, 0.0f, static_cast<float*>(C.data_ptr()),
               std::max<std::int64_t>(p.n, 1));
    } else {
      if (p.k == 0) { Tensor c = C; c.zero_(); continue; }
      gemm_f64(A.trans, B.trans, p.m, p.n, p.k, 1.0, static_cast<const double*>(A.t.data_ptr()), A.ld,
               static_cast<const double*>(B.t.data_ptr()), B.ld, 0.0, static_cast<double*>(C.data_ptr()),
               std::max<std::int64_t>(p.n, 1));
    }
  }
  return out.view(output_shape(p));
}

}  // namespace lmcore
