// The scalar reference for reductions: one pass over the input in row-major order, each element added
// into its output slot in f64 (i64 for integer sums), no vectors, no threads, no reordering.
#include <cmath>
#include <limits>
#include <vector>

#include "lmcore/core/reduce.h"
#include "src/core/op_util.h"

namespace lmcore {

namespace {

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum_reference";
    case ReduceOp::mean: return "mean_reference";
    case ReduceOp::amax: return "amax_reference";
    case ReduceOp::amin: return "amin_reference";
    case ReduceOp::logsumexp: return "logsumexp_reference";
    case ReduceOp::argmax: return "argmax_reference";
    case ReduceOp::argmin: return "argmin_reference";
  }
  return "reduce_reference";
}

}  // namespace

Tensor reduce_reference(ReduceOp op, const Tensor& x_in, const Shape& dims, bool keepdim) {
  const char* name = op_name(op);
  detail::check_computable(x_in, name, "input");
  const bool is_arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  Tensor x = x_in;
  if (op == ReduceOp::logsumexp && !is_floating(x.dtype())) x = x.to(DType::f32);
  if (op == ReduceOp::mean) detail::check_floating(x, name, "input");
  LMCORE_CHECK(!(is_arg && x.dtype() == DType::boolean), "{}: bool input is not supported", name);
  LMCORE_CHECK(!is_arg || dims.size() <= 1, "{}: expected at most one dim, found {}", name, dims.size());
  const bool flatten = is_arg && dims.empty();
  if (flatten) x = x.reshape({-1});
  std::vector<std::int64_t> red = detail::normalize_dims(flatten ? Shape{0} : dims, x.dim(), name);

  const std::int64_t nd = x.dim();
  std::vector<bool> is_red(static_cast<std::size_t>(nd), false);
  for (auto d : red) is_red[static_cast<std::size_t>(d)] = true;
  Shape kept, out_shape;
  std::int64_t inner = 1;
  for (std::int64_t d = 0; d < nd; ++d) {
    if (is_red[static_cast<std::size_t>(d)]) {
      inner *= x.size(d);
      if (keepdim) out_shape.push_back(1);
    } else {
      kept.push_back(x.size(d));
      out_shape.push_back(x.size(d));
    }
  }
  if (flatten && keepdim) out_shape = Shape(static_cast<std::size_t>(x_in.dim()), 1);
  const std::int64_t outer = checked_numel(kept, name);
  const bool needs_elements = op == ReduceOp::amax || op == ReduceOp::amin || is_arg;
  LMCORE_CHECK(!(needs_elements && inner == 0 && outer > 0), "{}: reduction over zero elements", name);

  DType out_dtype = x.dtype();
  if (op == ReduceOp::sum && !is_floating(x.dtype())) out_dtype = DType::i64;
  if (is_arg) out_dtype = DType::i64;
  Tensor out = Tensor::empty(kept, out_dtype);

  const Tensor xc = x.contiguous();
  const std::int64_t numel = xc.numel();
  // Output slot of element e: its coordinates with the reduced ones dropped.
  auto slot_of = [&](std::int64_t e) {
    std::int64_t slot = 0, mul = 1, red_pos = 0, red_mul = 1;
    for (std::int64_t d = nd - 1; d >= 0; --d) {
      const std::int64_t c = e % x.size(d);
      e /= x.size(d);
      if (is_red[static_cast<std::size_t>(d)]) {
        red_pos += c * red_mul;
        red_mul *= x.size(d);
      } else {
        slot += c * mul;
        mul *= x.size(d);
      }
    }
    return std::pair<std::int64_t, std::int64_t>{slot, red_pos};
  };

  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      using C = compute_t<T>;
      const T* src = xc.data<T>();
      auto is_nan = [](C v) {
        if constexpr (std::is_floating_point_v<C>) return std::isnan(v); else return false;
      };
      if (op == ReduceOp::sum && !is_floating(x.dtype())) {
        if constexpr (std::is_integral_v<T>) {
          std::vector<std::uint64_t> acc(static_cast<std::size_t>(outer), 0);
          for (std::int64_t e = 0; e < numel; ++e)
            acc[static_cast<std::size_t>(slot_of(e).first)] += static_cast<std::uint64_t>(static_cast<std::int64_t>(src[e]));
          for (std::int64_t r = 0; r < outer; ++r)
            out.data<std::int64_t>()[r] = static_cast<std::int64_t>(acc[static_cast<std::size_t>(r)]);
        }
      } else if (op == ReduceOp::sum || op == ReduceOp::mean) {
        if constexpr (std::is_floating_point_v<C>) {
          std::vector<double> acc(static_cast<std::size_t>(outer), 0.0);
          for (std::int64_t e = 0; e < numel; ++e) acc[static_cast<std::size_t>(slot_of(e).first)] += load_as_compute(src[e]);
          for (std::int64_t r = 0; r < outer; ++r) {
            double v = acc[static_cast<std::size_t>(r)];
            if (op == ReduceOp::mean) v /= static_cast<double>(inner);
            out.data<T>()[r] = store_from_compute<T>(static_cast<C>(v));
          }
        }
      } else if (op == ReduceOp::amax || op == ReduceOp::amin) {
        std::vector<C> best(static_cast<std::size_t>(outer));
        std::vector<bool> seen(static_cast<std::size_t>(outer), false);
        for (std::int64_t e = 0; e < numel; ++e) {
          const auto r = static_cast<std::size_t>(slot_of(e).first);
          const C v = load_as_compute(src[e]);
          if (!seen[r] || is_nan(v)) {
            if (!seen[r] || !is_nan(best[r])) best[r] = v;
            seen[r] = true;
          } else if (!is_nan(best[r]) && (op == ReduceOp::amax ? v > best[r] : v < best[r])) {
            best[r] = v;
          }
        }
        for (std::int64_t r = 0; r < outer; ++r) out.data<T>()[r] = store_from_compute<T>(best[static_cast<std::size_t>(r)]);
      } else if (is_arg) {
        std::vector<C> best(static_cast<std::size_t>(outer));
        std::vector<std::int64_t> where(static_cast<std::size_t>(outer), -1);
        for (std::int64_t e = 0; e < numel; ++e) {
          const auto [slot, pos] = slot_of(e);
          const auto r = static_cast<std::size_t>(slot);
          const C v = load_as_compute(src[e]);
          if (where[r] >= 0 && is_nan(best[r])) continue;  // the first NaN wins
          if (where[r] < 0 || is_nan(v) || (op == ReduceOp::argmax ? v > best[r] : v < best[r])) {
            best[r] = v;
            where[r] = pos;
          }
        }
        for (std::int64_t r = 0; r < outer; ++r) out.data<std::int64_t>()[r] = where[static_cast<std::size_t>(r)];
      } else if (op == ReduceOp::logsumexp) {
        if constexpr (std::is_floating_point_v<C>) {
          const double inf = std::numeric_limits<double>::infinity();
          std::vector<double> m(static_cast<std::size_t>(outer), -inf), s(static_cast<std::size_t>(outer), 0.0);
          for (std::int64_t e = 0; e < numel; ++e) {
            const auto r = static_cast<std::size_t>(slot_of(e).first);
            const double v = load_as_compute(src[e]);
            if (std::isnan(v) || std::isnan(m[r])) m[r] = std::numeric_limits<double>::quiet_NaN();
            else if (v > m[r]) m[r] = v;
          }
          for (std::int64_t e = 0; e < numel; ++e) {
            const auto r = static_cast<std::size_t>(slot_of(e).first);
            const double shift = std::isinf(m[r]) ? 0.0 : m[r];
            s[r] += std::exp(static_cast<double>(load_as_compute(src[e])) - shift);
          }
          for (std::int64_t r = 0; r < outer; ++r) {
            const auto i = static_cast<std::size_t>(r);
            const double v = std::isnan(m[i]) ? m[i] : std::log(s[i]) + (std::isinf(m[i]) ? 0.0 : m[i]);
            out.data<T>()[r] = store_from_compute<T>(static_cast<C>(v));
          }
        }
      }
    }
  });
  return out.view(out_shape);
}

}  // namespace lmcore
