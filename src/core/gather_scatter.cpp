// gather / scatter / scatter_add / scatter_reduce. Indices are validated in one serial pass before
// anything is written (so a bad index leaves self untouched and the error names the first bad
// position). The work is then split over "fibers": all coordinates except `dim`. A fiber of index
// only reads and writes the matching fiber of input/self, so fibers run in parallel without races and
// each fiber's writes keep index order, which makes every result deterministic.
#include "lmcore/core/gather_scatter.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "lmcore/core/copy.h"
#include "lmcore/core/parallel.h"
#include "src/core/op_util.h"

namespace lmcore {

ScatterReduce scatter_reduce_from_name(std::string_view name) {
  if (name == "sum") return ScatterReduce::sum;
  if (name == "prod") return ScatterReduce::prod;
  if (name == "amax") return ScatterReduce::amax;
  if (name == "amin") return ScatterReduce::amin;
  if (name == "mean") return ScatterReduce::mean;
  fail("scatter_reduce: argument 'reduce' expected one of sum, prod, amax, amin, mean, found '{}'", name);
}

namespace {

// "[2, 0, 1]" for the row-major position `linear` in `shape`.
std::string position_str(std::int64_t linear, const Shape& shape) {
  Shape pos(shape.size(), 0);
  for (std::int64_t d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
    pos[static_cast<std::size_t>(d)] = linear % shape[static_cast<std::size_t>(d)];
    linear /= shape[static_cast<std::size_t>(d)];
  }
  return shape_str(pos);
}

// Shape and argument checks shared by gather and the scatters, and the bounds check of every index.
// `target` is input (gather) or self (scatters); `src` is undefined for gather and scatter(value).
std::int64_t check_args(const char* op, const char* target_name, const Tensor& target, std::int64_t dim,
                        const Tensor& index, const Tensor& src) {
  detail::check_computable(target, op, target_name);
  detail::check_defined(index, op, "index");
  LMCORE_CHECK(index.dtype() == DType::i64, "{}: argument 'index' expected dtype i64, found {}", op, index.dtype());
  const std::int64_t nd = target.dim();
  const std::int64_t d = wrap_dim(dim, std::max<std::int64_t>(nd, 1), op);
  LMCORE_CHECK(index.dim() == nd, "{}: argument 'index' expected {} dims (as '{}' {}), found {} (shape {})", op, nd,
               target_name, shape_str(target.shape()), index.dim(), shape_str(index.shape()));
  if (src.defined()) {
    detail::check_computable(src, op, "src");
    LMCORE_CHECK(src.dtype() == target.dtype(), "{}: argument 'src' expected dtype {} (the dtype of 'self'), found {}",
                 op, target.dtype(), src.dtype());
    LMCORE_CHECK(src.dim() == nd, "{}: argument 'src' expected {} dims, found {} (shape {})", op, nd, src.dim(),
                 shape_str(src.shape()));
  }
  for (std::int64_t k = 0; k < nd; ++k) {
    if (k != d)
      LMCORE_CHECK(index.size(k) <= target.size(k),
                   "{}: argument 'index' has size {} in dim {}, expected <= {} (the size of '{}' {} there)", op,
                   index.size(k), k, target.size(k), target_name, shape_str(target.shape()));
    if (src.defined())
      LMCORE_CHECK(index.size(k) <= src.size(k),
                   "{}: argument 'index' has size {} in dim {}, expected <= {} (the size of 'src' {} there)", op,
                   index.size(k), k, src.size(k), shape_str(src.shape()));
  }
  const std::int64_t limit = nd == 0 ? 1 : target.size(d);
  const std::int64_t n = index.numel();
  const std::int64_t* ip = static_cast<const std::int64_t*>(index.data_ptr());
  for (std::int64_t e = 0; e < n; ++e) {
    const std::int64_t v = ip[detail::offset_of(e, index.shape(), index.strides())];
    if (v < 0 || v >= limit)
      fail("{}: argument 'index' has index{} = {}, out of range: expected 0 <= index < {} (the size of '{}' {} "
           "along dim {})",
           op, position_str(e, index.shape()), v, limit, target_name, shape_str(target.shape()), d);
  }
  return d;
}

// The fiber walk: fn(index_offset, src_offset, target_offset, length) handles one fiber; offsets are
// in elements, at the fiber's `dim` coordinate 0.

template <typename Fn>
void for_each_fiber(const Tensor& index, std::int64_t d, const Shape& index_strides, const Shape& src_strides,
                    const Shape& target_strides, Fn&& fn) {
  Shape fshape = index.shape();
  std::int64_t length = 1;
  if (!fshape.empty()) {
    length = fshape[static_cast<std::size_t>(d)];
    fshape[static_cast<std::size_t>(d)] = 1;
  }
  const std::int64_t count = checked_numel(fshape, "scatter");
  if (count == 0 || length == 0) return;
  const std::int64_t grain = std::max<std::int64_t>(1, 8192 / length);
  parallel_for(0, count, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t f = lo; f < hi; ++f)
      fn(detail::offset_of(f, fshape, index_strides), detail::offset_of(f, fshape, src_strides),
         detail::offset_of(f, fshape, target_strides), length);
  });
}

std::int64_t stride_or_zero(const Tensor& t, std::int64_t d) { return t.dim() == 0 ? 0 : t.stride(d); }

// One step of a reduction, in compute arithmetic; integers wrap like torch's (through u64, no UB).
template <typename T>
T combine(ScatterReduce r, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    const auto ua = static_cast<std::uint64_t>(static_cast<std::int64_t>(a));
    const auto ub = static_cast<std::uint64_t>(static_cast<std::int64_t>(b));
    switch (r) {
      case ScatterReduce::sum:
      case ScatterReduce::mean: return detail::cast_element<T>(static_cast<std::int64_t>(ua + ub));
      case ScatterReduce::prod: return detail::cast_element<T>(static_cast<std::int64_t>(ua * ub));
      case ScatterReduce::amax: return a > b ? a : b;
      case ScatterReduce::amin: return a < b ? a : b;
    }
    return a;
  } else {
    const compute_t<T> x = load_as_compute(a), y = load_as_compute(b);
    compute_t<T> v = x;
    switch (r) {
      case ScatterReduce::sum:
      case ScatterReduce::mean: v = x + y; break;
      case ScatterReduce::prod: v = x * y; break;
      case ScatterReduce::amax: v = std::isnan(x) ? x : (std::isnan(y) || y > x ? y : x); break;
      case ScatterReduce::amin: v = std::isnan(x) ? x : (std::isnan(y) || y < x ? y : x); break;
    }
    return store_from_compute<T>(v);
  }
}

template <typename T>
T identity_of(ScatterReduce r) {
  using C = compute_t<T>;
  switch (r) {
    case ScatterReduce::sum:
    case ScatterReduce::mean: return store_from_compute<T>(C(0));
    case ScatterReduce::prod: return store_from_compute<T>(C(1));
    case ScatterReduce::amax:
      if constexpr (std::is_floating_point_v<C>) return store_from_compute<T>(-std::numeric_limits<C>::infinity());
      else return std::numeric_limits<T>::lowest();
    case ScatterReduce::amin:
      if constexpr (std::is_floating_point_v<C>) return store_from_compute<T>(std::numeric_limits<C>::infinity());
      else return std::numeric_limits<T>::max();
  }
  return T{};
}

// Divides self[pos] by count[pos] (count >= 1) for mean: floor division for integers, as torch.
template <typename T>
T divide_mean(T v, std::int64_t count) {
  if constexpr (std::is_integral_v<T>) {
    const auto x = static_cast<std::int64_t>(v);
    std::int64_t q = x / count;
    if ((x % count != 0) && ((x < 0) != (count < 0))) --q;
    return static_cast<T>(q);
  } else {
    return store_from_compute<T>(load_as_compute(v) / static_cast<compute_t<T>>(count));
  }
}

// kind 0: assign src (or `value` when src is undefined); 1: add; 2: reduce.
void scatter_impl(const char* op, int kind, Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src,
                  double value, ScatterReduce reduce, bool include_self) {
  const std::int64_t d = check_args(op, "self", self, dim, index, src);
  if (kind == 2 && reduce == ScatterReduce::mean)
    LMCORE_CHECK(self.dtype() != DType::boolean, "{}: reduce='mean' is not supported for dtype bool (as torch)", op);
  if (index.numel() == 0) return;
  const std::int64_t is = stride_or_zero(index, d), ts = stride_or_zero(self, d);
  const std::int64_t ss = src.defined() ? stride_or_zero(src, d) : 0;
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      T* tp = static_cast<T*>(self.data_ptr());
      const T* sp = src.defined() ? static_cast<const T*>(src.data_ptr()) : nullptr;
      const T fill = detail::cast_element<T>(value);
      const std::int64_t* ip = static_cast<const std::int64_t*>(index.data_ptr());
      const bool mean = kind == 2 && reduce == ScatterReduce::mean;
      const ScatterReduce r = kind == 1 ? ScatterReduce::sum : reduce;
      for_each_fiber(index, d, index.strides(), src.defined() ? src.strides() : Shape(index.dim(), 0), self.strides(),
                     [&](std::int64_t io, std::int64_t so, std::int64_t to, std::int64_t length) {
                       if (kind == 0) {
                         for (std::int64_t j = 0; j < length; ++j)
                           tp[to + ip[io + j * is] * ts] = sp != nullptr ? sp[so + j * ss] : fill;
                         return;
                       }
                       if (kind == 2 && !include_self) {
                         const T id = identity_of<T>(r);
                         for (std::int64_t j = 0; j < length; ++j) tp[to + ip[io + j * is] * ts] = id;
                       }
                       for (std::int64_t j = 0; j < length; ++j) {
                         T& dst = tp[to + ip[io + j * is] * ts];
                         dst = combine<T>(r, dst, sp[so + j * ss]);
                       }
                       if (mean) {
                         // Count per target position along this fiber, then divide each once.
                         const std::int64_t size = self.dim() == 0 ? 1 : self.size(d);
                         std::vector<std::int64_t> count(static_cast<std::size_t>(size), 0);
                         for (std::int64_t j = 0; j < length; ++j) ++count[static_cast<std::size_t>(ip[io + j * is])];
                         for (std::int64_t k = 0; k < size; ++k) {
                           const std::int64_t c = count[static_cast<std::size_t>(k)] + (include_self ? 1 : 0);
                           if (count[static_cast<std::size_t>(k)] > 0) tp[to + k * ts] = divide_mean(tp[to + k * ts], c);
                         }
                       }
                     });
    }
  });
}

}  // namespace

Tensor gather(const Tensor& input, std::int64_t dim, const Tensor& index) {
  const std::int64_t d = check_args("gather", "input", input, dim, index, Tensor());
  Tensor out = Tensor::empty(index.shape(), input.dtype());
  if (index.numel() == 0) return out;
  const std::int64_t is = stride_or_zero(index, d), xs = stride_or_zero(input, d), os = stride_or_zero(out, d);
  const std::int64_t* ip = static_cast<const std::int64_t*>(index.data_ptr());
  const std::size_t item = input.itemsize();
  auto* xp = static_cast<const std::byte*>(input.data_ptr());
  auto* op = static_cast<std::byte*>(out.data_ptr());
  // Element moves by size only: gather never converts, so one loop serves every dtype.
  for_each_fiber(index, d, index.strides(), out.strides(), input.strides(),
                 [&](std::int64_t io, std::int64_t oo, std::int64_t xo, std::int64_t length) {
                   for (std::int64_t j = 0; j < length; ++j)
                     std::memcpy(op + (oo + j * os) * static_cast<std::int64_t>(item),
                                 xp + (xo + ip[io + j * is] * xs) * static_cast<std::int64_t>(item), item);
                 });
  return out;
}

Tensor& scatter_(Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  self.check_writable("scatter_");
  scatter_impl("scatter", 0, self, dim, index, src, 0.0, ScatterReduce::sum, true);
  return self;
}
Tensor& scatter_(Tensor& self, std::int64_t dim, const Tensor& index, double value) {
  self.check_writable("scatter_");
  scatter_impl("scatter", 0, self, dim, index, Tensor(), value, ScatterReduce::sum, true);
  return self;
}
Tensor& scatter_add_(Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined(src, "scatter_add", "src");
  self.check_writable("scatter_add_");
  scatter_impl("scatter_add", 1, self, dim, index, src, 0.0, ScatterReduce::sum, true);
  return self;
}
Tensor& scatter_reduce_(Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src, ScatterReduce reduce,
                        bool include_self) {
  detail::check_defined(src, "scatter_reduce", "src");
  self.check_writable("scatter_reduce_");
  scatter_impl("scatter_reduce", 2, self, dim, index, src, 0.0, reduce, include_self);
  return self;
}

Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined(self, "scatter", "self");
  Tensor out = self.clone();
  return scatter_(out, dim, index, src);
}
Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, double value) {
  detail::check_defined(self, "scatter", "self");
  Tensor out = self.clone();
  return scatter_(out, dim, index, value);
}
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined(self, "scatter_add", "self");
  Tensor out = self.clone();
  return scatter_add_(out, dim, index, src);
}
Tensor scatter_reduce(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src,
                      ScatterReduce reduce, bool include_self) {
  detail::check_defined(self, "scatter_reduce", "self");
  Tensor out = self.clone();
  return scatter_reduce_(out, dim, index, src, reduce, include_self);
}

// ---- references: a walk over every index position in row-major order, one element at a time ----

namespace {

// Coordinates of row-major position e in `shape`.
Shape coords_of(std::int64_t e, const Shape& shape) {
  Shape c(shape.size(), 0);
  for (std::int64_t k = static_cast<std::int64_t>(shape.size()) - 1; k >= 0; --k) {
    c[static_cast<std::size_t>(k)] = e % shape[static_cast<std::size_t>(k)];
    e /= shape[static_cast<std::size_t>(k)];
  }
  return c;
}

std::int64_t dot(const Shape& c, const Shape& strides) {
  std::int64_t off = 0;
  for (std::size_t k = 0; k < c.size(); ++k) off += c[k] * strides[k];
  return off;
}

}  // namespace

Tensor gather_reference(const Tensor& input, std::int64_t dim, const Tensor& index) {
  const std::int64_t d = check_args("gather_reference", "input", input, dim, index, Tensor());
  Tensor out = Tensor::empty(index.shape(), input.dtype());
  const std::size_t item = input.itemsize();
  for (std::int64_t e = 0; e < index.numel(); ++e) {
    Shape c = coords_of(e, index.shape());
    const std::int64_t v = static_cast<const std::int64_t*>(index.data_ptr())[dot(c, index.strides())];
    const std::int64_t o = dot(c, out.strides());
    if (!c.empty()) c[static_cast<std::size_t>(d)] = v;
    std::memcpy(static_cast<std::byte*>(out.data_ptr()) + o * static_cast<std::int64_t>(item),
                static_cast<const std::byte*>(input.data_ptr()) + dot(c, input.strides()) * static_cast<std::int64_t>(item),
                item);
  }
  return out;
}

Tensor scatter_reference(int kind, const Tensor& self_in, std::int64_t dim, const Tensor& index, const Tensor& src,
                         ScatterReduce reduce, bool include_self) {
  detail::check_defined(self_in, "scatter_reference", "self");
  Tensor self = self_in.clone();
  const std::int64_t d = check_args("scatter_reference", "self", self, dim, index, src);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      T* tp = self.data<T>();
      const T* sp = src.data<T>();
      const std::int64_t* ip = index.data<std::int64_t>();
      const ScatterReduce r = kind == 1 ? ScatterReduce::sum : reduce;
      std::vector<std::int64_t> count(static_cast<std::size_t>(self.numel()), include_self ? 1 : 0);
      std::vector<bool> touched(static_cast<std::size_t>(self.numel()), false);
      // self is a fresh contiguous clone, so a row-major position is also its offset.
      auto target_of = [&](std::int64_t e) {
        Shape c = coords_of(e, index.shape());
        if (!c.empty()) c[static_cast<std::size_t>(d)] = ip[dot(coords_of(e, index.shape()), index.strides())];
        return dot(c, self.strides());
      };
      for (std::int64_t e = 0; e < index.numel(); ++e) {
        const std::int64_t t = target_of(e);
        const T v = sp[dot(coords_of(e, index.shape()), src.strides())];
        if (kind == 0) {
          tp[t] = v;
          continue;
        }
        if (kind == 2 && !include_self && !touched[static_cast<std::size_t>(t)]) tp[t] = identity_of<T>(r);
        touched[static_cast<std::size_t>(t)] = true;
        ++count[static_cast<std::size_t>(t)];
        tp[t] = combine<T>(r, tp[t], v);
      }
      if (kind == 2 && reduce == ScatterReduce::mean) {
        for (std::int64_t t = 0; t < self.numel(); ++t)
          if (touched[static_cast<std::size_t>(t)]) tp[t] = divide_mean(tp[t], count[static_cast<std::size_t>(t)]);
      }
    }
  });
  return self;
}

}  // namespace lmcore
