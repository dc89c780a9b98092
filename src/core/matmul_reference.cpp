// matmul_reference: torch.matmul's shape rules and a triple loop in f64, written apart from matmul.cpp
// (no plan, no BLAS operand handling, no views) so that the tests of matmul check it against an
// independent reading of the definition.
#include <vector>

#include "lmcore/core/matmul.h"

namespace lmcore {

Tensor matmul_reference(const Tensor& a_in, const Tensor& b_in) {
  const char* op = "matmul_reference";
  LMCORE_CHECK(a_in.defined() && b_in.defined() && a_in.dim() >= 1 && b_in.dim() >= 1,
               "{}: operands must be defined with at least 1 dim", op);
  LMCORE_CHECK(a_in.dtype() == b_in.dtype() && is_floating(a_in.dtype()), "{}: expected two float operands of one dtype",
               op);
  // 1. Shapes: a 1-D a is a row [1, K], a 1-D b a column [K, 1]; both extra dims are dropped at the end.
  Shape sa = a_in.shape(), sb = b_in.shape();
  const bool row = sa.size() == 1, col = sb.size() == 1;
  if (row) sa.insert(sa.begin(), 1);
  if (col) sb.push_back(1);
  const std::int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  LMCORE_CHECK(sb[sb.size() - 2] == K, "{}: inner dimensions differ ({} vs {})", op, K, sb[sb.size() - 2]);
  // 2. Batch dims, right-aligned: equal, or 1 (repeated), or absent.
  const std::size_t na = sa.size() - 2, nb = sb.size() - 2, nd = na > nb ? na : nb;
  Shape batch(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    const std::int64_t x = d + na >= nd ? sa[d + na - nd] : 1, y = d + nb >= nd ? sb[d + nb - nd] : 1;
    LMCORE_CHECK(x == y || x == 1 || y == 1, "{}: batch dims {} and {} do not broadcast", op, x, y);
    batch[d] = x == 1 ? y : x;
  }
  // 3. The values in row-major order of each operand's own shape.
  const std::vector<double> A = a_in.to_vector<double>(), B = b_in.to_vector<double>();
  std::int64_t batches = 1;
  for (std::int64_t x : batch) batches *= x;
  std::vector<double> C(static_cast<std::size_t>(batches * M * N), 0.0);
  // Flat batch index -> the flat batch index of an operand with `n` batch dims of sizes `dims`.
  auto operand_batch = [&](std::int64_t flat, const Shape& dims, std::size_t n) {
    std::int64_t index = 0, stride = 1;
    for (std::size_t d = nd; d-- > nd - n;) {
      const std::int64_t i = flat % batch[d];
      flat /= batch[d];
      const std::int64_t size = dims[d - (nd - n)];
      index += (size == 1 ? 0 : i) * stride;
      stride *= size;
    }
    return index;
  };
  for (std::int64_t t = 0; t < batches; ++t) {
    const std::int64_t ia = operand_batch(t, sa, na), ib = operand_batch(t, sb, nb);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += A[(ia * M + i) * K + k] * B[(ib * K + k) * N + j];
        C[(t * M + i) * N + j] = acc;
      }
  }
  // 4. The output shape: batch, then M unless a was 1-D, then N unless b was 1-D.
  Shape out = batch;
  if (!row) out.push_back(M);
  if (!col) out.push_back(N);
  return Tensor::from_vector(C, out);
}

}  // namespace lmcore
