#include "src/dist/reduce.h"

#include <algorithm>
#include <type_traits>

namespace lmcore::dist::detail {

namespace {

template <typename T>
T combine_one(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return (op == ReduceOp::product || op == ReduceOp::min) ? (a && b) : (a || b);
  } else if constexpr (std::is_integral_v<T>) {
    // Wrap-around arithmetic through the unsigned type: signed overflow is UB, torch wraps.
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::product: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case ReduceOp::min: return std::min(a, b);
      case ReduceOp::max: return std::max(a, b);
      default: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
  } else {
    using C = compute_t<T>;
    const C x = load_as_compute(a), y = load_as_compute(b);
    C r;
    switch (op) {
      case ReduceOp::product: r = x * y; break;
      // NaN propagates like torch.minimum/maximum.
      case ReduceOp::min: r = (x != x) ? x : (y != y) ? y : std::min(x, y); break;
      case ReduceOp::max: r = (x != x) ? x : (y != y) ? y : std::max(x, y); break;
      default: r = x + y; break;
    }
    return store_from_compute<T>(r);
  }
}

template <typename T>
void combine_typed(T* out, const T* a, const T* b, std::int64_t n, ReduceOp op) {
  // The common case gets its own loop so the compiler vectorises it.
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (op == ReduceOp::sum || op == ReduceOp::avg || op == ReduceOp::premul_sum) {
      for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return;
    }
  }
  for (std::int64_t i = 0; i < n; ++i) out[i] = combine_one<T>(a[i], b[i], op);
}

}  // namespace

void combine(void* out, const void* a, const void* b, std::int64_t n, DType dtype, ReduceOp op) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    combine_typed<T>(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, op);
  });
}

void finish_avg(void* x, std::int64_t n, DType dtype, int world_size) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(x);
    if constexpr (std::is_same_v<T, bool>) {
      LMCORE_ASSERT(false);  // rejected by reduce_unsupported_reason
    } else if constexpr (std::is_integral_v<T>) {
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(world_size));
    } else {
      using C = compute_t<T>;
      for (std::int64_t i = 0; i < n; ++i) p[i] = store_from_compute<T>(load_as_compute(p[i]) / static_cast<C>(world_size));
    }
  });
}

void premultiply(void* out, const void* in, std::int64_t n, DType dtype, double factor) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    const T* s = static_cast<const T*>(in);
    if constexpr (std::is_same_v<T, bool>) {
      LMCORE_ASSERT(false);
    } else if constexpr (std::is_integral_v<T>) {
      for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(static_cast<double>(s[i]) * factor);
    } else {
      using C = compute_t<T>;
      for (std::int64_t i = 0; i < n; ++i) o[i] = store_from_compute<T>(load_as_compute(s[i]) * static_cast<C>(factor));
    }
  });
}

std::string reduce_unsupported_reason(DType dtype, ReduceOp op) {
  if (dtype == DType::boolean && (op == ReduceOp::avg || op == ReduceOp::premul_sum)) {
    return fmt::format("op {} is not defined for bool", reduce_op_name(op));
  }
  return "";
}

}  // namespace lmcore::dist::detail
