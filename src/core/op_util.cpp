#include "src/core/op_util.h"

#include <algorithm>

namespace lmcore::detail {

void check_defined(const Tensor& t, const char* op, const char* arg) {
  LMCORE_CHECK(t.defined(), "{}: argument '{}' is undefined", op, arg);
}

void check_computable(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  LMCORE_CHECK(!is_storage_only(t.dtype()),
               "{}: argument '{}' has dtype {}, a storage-only type (cast it first); expected one of f32, f64, "
               "f16, bf16, i8, u8, i16, i32, i64, bool",
               op, arg, t.dtype());
}

void check_floating(const Tensor& t, const char* op, const char* arg) {
  check_computable(t, op, arg);
  LMCORE_CHECK(is_floating(t.dtype()), "{}: argument '{}' expected a floating-point dtype (f32, f64, f16, bf16), found {}",
               op, arg, t.dtype());
}

namespace {

int float_rank(DType d) {
  switch (d) {
    case DType::f16: return 1;
    case DType::bf16: return 1;
    case DType::f32: return 2;
    case DType::f64: return 3;
    default: return 0;
  }
}

int int_bits(DType d) {
  switch (d) {
    case DType::i8: case DType::u8: return 8;
    case DType::i16: return 16;
    case DType::i32: return 32;
    case DType::i64: return 64;
    default: return 0;
  }
}

DType signed_of_bits(int bits) {
  switch (bits) {
    case 8: return DType::i8;
    case 16: return DType::i16;
    case 32: return DType::i32;
    default: return DType::i64;
  }
}

}  // namespace

DType promote_types(DType a, DType b, const char* op) {
  LMCORE_CHECK(!is_storage_only(a) && !is_storage_only(b),
               "{}: cannot compute with storage-only dtypes, found {} and {}", op, a, b);
  if (a == b) return a;
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (float_rank(a) == float_rank(b)) return DType::f32;  // f16 with bf16
    return float_rank(a) > float_rank(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integers, different.
  if (a == DType::u8 || b == DType::u8) {
    const DType other = a == DType::u8 ? b : a;
    // u8 fits in the next signed width: u8 + i8 -> i16, u8 + i16 -> i16, u8 + i32 -> i32.
    return signed_of_bits(std::max(16, int_bits(other)));
  }
  return int_bits(a) >= int_bits(b) ? a : b;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  const std::size_t lead = shape.size() - t.shape().size();
  for (std::size_t i = 0; i < t.shape().size(); ++i) st[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

std::vector<std::int64_t> normalize_dims(const Shape& dims, std::int64_t ndim, const char* op) {
  std::vector<std::int64_t> out;
  if (dims.empty()) {
    for (std::int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (std::int64_t d : dims) {
    const std::int64_t w = wrap_dim(d, std::max<std::int64_t>(ndim, 1), op);
    LMCORE_CHECK(std::find(out.begin(), out.end(), w) == out.end(),
                 "{}: argument 'dim' lists dim {} more than once (dims {})", op, w, fmt::join(dims, ", "));
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  // A 0-d tensor reduces over "dim 0" / "dim -1" as torch allows: nothing to reduce.
  if (ndim == 0) out.clear();
  return out;
}

}  // namespace lmcore::detail
