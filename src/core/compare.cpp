// Comparisons: promote both operands to one dtype, then one strided loop (internal::for_each_row) whose
// dense rows go to the Highway kernels of compare_kernels.cpp where one exists.
#include "lmcore/core/compare.h"

#include <cstring>
#include <string_view>

#include "lmcore/core/copy.h"
#include "lmcore/core/internal/strided_loop.h"
#include "src/core/compare_kernels.h"
#include "src/core/op_util.h"

namespace lmcore {

const char* compare_op_name(CompareOp op) {
  switch (op) {
    case CompareOp::eq: return "eq";
    case CompareOp::ne: return "ne";
    case CompareOp::lt: return "lt";
    case CompareOp::le: return "le";
    case CompareOp::gt: return "gt";
    case CompareOp::ge: return "ge";
  }
  return "compare";
}

CompareOp compare_op_from_name(const char* name) {
  const std::string_view s(name);
  for (int i = 0; i < 6; ++i)
    if (s == compare_op_name(static_cast<CompareOp>(i))) return static_cast<CompareOp>(i);
  fail("compare: unknown comparison '{}', expected one of eq, ne, lt, le, gt, ge", s);
}

namespace {

template <typename C>
inline bool apply(CompareOp op, C a, C b) {
  switch (op) {
    case CompareOp::eq: return a == b;
    case CompareOp::ne: return a != b;
    case CompareOp::lt: return a < b;
    case CompareOp::le: return a <= b;
    case CompareOp::gt: return a > b;
    case CompareOp::ge: return a >= b;
  }
  return false;
}

template <typename T>
constexpr bool has_vector_kernel = std::is_same_v<T, float> || std::is_same_v<T, std::int32_t> ||
                                   std::is_same_v<T, std::int16_t> || std::is_same_v<T, std::int8_t> ||
                                   std::is_same_v<T, std::uint8_t>;

struct Prepared {
  Tensor a, b, out;
  Shape a_strides, b_strides;
};

Prepared prepare(CompareOp op, const Tensor& a, const Tensor& b, const char* name) {
  detail::check_computable(a, name, "input");
  detail::check_computable(b, name, "other");
  const DType common = detail::promote_types(a.dtype(), b.dtype(), name);
  Prepared p;
  p.a = a.to(common);
  p.b = b.to(common);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  p.out = Tensor::empty(shape, DType::boolean);
  p.a_strides = detail::broadcast_strides(p.a, shape);
  p.b_strides = detail::broadcast_strides(p.b, shape);
  (void)op;
  return p;
}

}  // namespace

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = compare_op_name(op);
  Prepared p = prepare(op, a, b, name);
  visit_dtype(p.a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      constexpr auto kT = static_cast<std::int64_t>(sizeof(T));
      internal::for_each_row<3>(
          p.out.shape(), {p.out.strides(), p.a_strides, p.b_strides},
          {static_cast<std::byte*>(p.out.data_ptr()), static_cast<std::byte*>(p.a.data_ptr()),
           static_cast<std::byte*>(p.b.data_ptr())},
          {1, sizeof(T), sizeof(T)},
          [&](std::array<std::byte*, 3> ptr, std::int64_t n, std::array<std::int64_t, 3> step) {
            auto* out = reinterpret_cast<bool*>(ptr[0]);
            const auto* pa = reinterpret_cast<const T*>(ptr[1]);
            const auto* pb = reinterpret_cast<const T*>(ptr[2]);
            const bool dense_out = step[0] == 1;
            if constexpr (has_vector_kernel<T>) {
              if (dense_out && step[1] == kT && (step[2] == kT || step[2] == 0)) {
                detail::compare_run(static_cast<int>(op), out, pa, pb, step[2] == 0 ? 0 : 1, n);
                return;
              }
              if (dense_out && step[1] == 0 && step[2] == kT) {
                // value OP run == run (mirrored OP) value.
                static constexpr int kMirror[6] = {0, 1, 4, 5, 2, 3};
                detail::compare_run(kMirror[static_cast<int>(op)], out, pb, pa, 0, n);
                return;
              }
            }
            for (std::int64_t i = 0; i < n; ++i) {
              T x, y;
              std::memcpy(&x, ptr[1] + i * step[1], sizeof(T));
              std::memcpy(&y, ptr[2] + i * step[2], sizeof(T));
              const bool r = apply(op, load_as_compute(x), load_as_compute(y));
              std::memcpy(ptr[0] + i * step[0], &r, 1);
            }
          });
    }
  });
  return p.out;
}

namespace {

// The dtype torch gives `tensor OP python_number`: the tensor's, unless a float number meets a
// non-floating tensor (-> f32) or an integer meets a bool tensor (-> i64).
Tensor scalar_tensor(DType t, bool is_float_scalar, double d, std::int64_t i) {
  DType dt = t;
  if (is_float_scalar && !is_floating(t)) dt = DType::f32;
  if (!is_float_scalar && t == DType::boolean) dt = DType::i64;
  Tensor s = Tensor::empty({}, dt);
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    *s.data<T>() = is_float_scalar ? detail::cast_element<T>(d) : detail::cast_element<T>(i);
  });
  return s;
}

}  // namespace

Tensor compare_scalar(CompareOp op, const Tensor& a, double b) {
  detail::check_computable(a, compare_op_name(op), "input");
  return compare(op, a, scalar_tensor(a.dtype(), true, b, 0));
}

Tensor compare_scalar(CompareOp op, const Tensor& a, std::int64_t b) {
  detail::check_computable(a, compare_op_name(op), "input");
  return compare(op, a, scalar_tensor(a.dtype(), false, 0.0, b));
}

namespace {

// Element i of a buffer of X, cast to C. The reference loop is written once per common type C and
// reads each operand through one of these (a loop per (C, A, B) triple was ~2000 instantiations).
template <typename C, typename X>
C element_cast(const void* p, std::int64_t i) {
  return detail::cast_element<C>(static_cast<const X*>(p)[i]);
}
template <typename C>
using ElementAs = C (*)(const void*, std::int64_t);
template <typename C>
ElementAs<C> element_as(DType t) {
  return visit_dtype(t, [](auto tag) -> ElementAs<C> {
    using X = typename decltype(tag)::type;
    if constexpr (detail::is_storage_only_v<X>) return nullptr;  // check_computable refused it
    else return &element_cast<C, X>;
  });
}

}  // namespace

Tensor compare_reference(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = "compare_reference";
  detail::check_computable(a, name, "input");
  detail::check_computable(b, name, "other");
  const DType common = detail::promote_types(a.dtype(), b.dtype(), name);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, DType::boolean);
  const Shape sa = detail::broadcast_strides(a, shape), sb = detail::broadcast_strides(b, shape);
  const std::int64_t n = out.numel();
  visit_dtype(common, [&](auto tag) {
    using C = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<C>) {
      const ElementAs<C> load_a = element_as<C>(a.dtype()), load_b = element_as<C>(b.dtype());
      bool* po = out.data<bool>();
      for (std::int64_t e = 0; e < n; ++e) {
        const C x = load_a(a.data_ptr(), detail::offset_of(e, shape, sa));
        const C y = load_b(b.data_ptr(), detail::offset_of(e, shape, sb));
        po[e] = apply(op, load_as_compute(x), load_as_compute(y));
      }
    }
  });
  return out;
}

}  // namespace lmcore
