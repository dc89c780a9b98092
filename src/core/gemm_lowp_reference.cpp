// gemm_lowp_reference: the bf16/f16 GEMM by triple loop in f64, the yardstick of gemm_lowp's tests.
// It shares nothing with the fast paths: elements are read through the storage types' own f32
// conversions and every sum is a double, in order of K.
#include <vector>

#include "lmcore/core/error.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/low_precision.h"

namespace lmcore {

namespace {

double load(DType dt, const void* p, std::int64_t i) {
  switch (dt) {
    case DType::bf16: return static_cast<const bf16*>(p)[i].to_f32();
    case DType::f16: return static_cast<const f16*>(p)[i].to_f32();
    case DType::f32: return static_cast<const float*>(p)[i];
    default: fail("gemm_lowp_reference: unsupported dtype {}", dt);
  }
}

void store(DType dt, void* p, std::int64_t i, double v) {
  const float f = static_cast<float>(v);
  switch (dt) {
    case DType::bf16: static_cast<bf16*>(p)[i] = bf16::from_f32(f); return;
    case DType::f16: static_cast<f16*>(p)[i] = f16::from_f32(f); return;
    case DType::f32: static_cast<float*>(p)[i] = f; return;
    default: fail("gemm_lowp_reference: unsupported dtype {}", dt);
  }
}

}  // namespace

void gemm_lowp_reference(DType ab, DType c_dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                         std::int64_t k, float alpha, const void* a, std::int64_t lda, const void* b,
                         std::int64_t ldb, float beta, void* c, std::int64_t ldc) {
  LMCORE_CHECK(ab == DType::bf16 || ab == DType::f16, "gemm_lowp_reference: A/B dtype must be bf16 or f16, found {}", ab);
  LMCORE_CHECK(c_dtype == DType::f32 || c_dtype == ab, "gemm_lowp_reference: C dtype must be f32 or {}, found {}", ab,
               c_dtype);
  // Each element of A and B is read once, into rows of op(A) and columns of op(B) as doubles, so that
  // the triple loop below runs over plain arrays (the tests call this on K = 4096 under the sanitizers).
  std::vector<double> rows(static_cast<std::size_t>(m * k)), cols(static_cast<std::size_t>(n * k));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t t = 0; t < k; ++t) rows[static_cast<std::size_t>(i * k + t)] = load(ab, a, trans_a ? t * lda + i : i * lda + t);
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t t = 0; t < k; ++t) cols[static_cast<std::size_t>(j * k + t)] = load(ab, b, trans_b ? j * ldb + t : t * ldb + j);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const double* x = rows.data() + i * k;
      const double* y = cols.data() + j * k;
      double acc = 0;
      for (std::int64_t t = 0; t < k; ++t) acc += x[t] * y[t];
      double out = static_cast<double>(alpha) * acc;
      if (beta != 0.0f) out += static_cast<double>(beta) * load(c_dtype, c, i * ldc + j);
      store(c_dtype, c, i * ldc + j, out);
    }
}

}  // namespace lmcore
