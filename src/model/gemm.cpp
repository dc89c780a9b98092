#include "src/model/gemm.h"

#include <vector>

#include "lmcore/core/copy.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/tensor.h"

namespace lmcore::model::detail {

namespace {
// A row-major [rows, cols] operand with row stride ld, widened to a dense f32 copy.
std::vector<float> widen(const void* p, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  const Tensor src = Tensor::from_blob(const_cast<void*>(p), {rows, cols}, DType::bf16, nullptr, {ld, 1});
  Tensor::from_blob(out.data(), {rows, cols}, DType::f32, nullptr).copy_(src);
  return out;
}
}  // namespace

void gemm(DType compute, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (compute == DType::f32) {
    gemm_f32(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb, beta,
             c, ldc);
    return;
  }
  LMCORE_CHECK(compute == DType::bf16, "model gemm: compute dtype must be f32 or bf16, found {}", compute);
  // bf16 operands, f32 accumulation: widened copies through sgemm (exact: every bf16 is an f32).
  const std::vector<float> a32 = trans_a ? widen(a, k, m, lda) : widen(a, m, k, lda);
  const std::vector<float> b32 = trans_b ? widen(b, n, k, ldb) : widen(b, k, n, ldb);
  gemm_f32(trans_a, trans_b, m, n, k, alpha, a32.data(), trans_a ? m : k, b32.data(), trans_b ? k : n, beta, c, ldc);
}

}  // namespace lmcore::model::detail
