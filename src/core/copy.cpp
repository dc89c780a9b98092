#include "lmcore/core/copy.h"

#include <array>
#include <cstring>
#include <limits>

#include "lmcore/core/internal/strided_loop.h"
#include "src/core/cast_kernels.h"

namespace lmcore {
namespace {

void check_copy_args(const Tensor& src, const Tensor& dst, const char* op) {
  LMCORE_CHECK(src.defined(), "{}: argument 'src' is undefined", op);
  LMCORE_CHECK(dst.defined(), "{}: argument 'dst' is undefined", op);
  const Shape b = broadcast_shapes(src.shape(), dst.shape(), op);
  LMCORE_CHECK(b == dst.shape(), "{}: src of shape {} does not broadcast to dst of shape {}", op,
               shape_str(src.shape()), shape_str(dst.shape()));
}

// One row of copy_cast for a (dst, src) dtype pair, and one element of copy_cast_reference. The loops
// over the rows and the indices are written once and call these through a pointer: instantiating them
// for each of the 15 x 15 pairs made this file the slowest of the build (50 s at -O3, 100 s under ASan).
using CastRow = void (*)(std::array<std::byte*, 2> p, std::int64_t n, std::array<std::int64_t, 2> step);
using CastElement = void (*)(void* dst, const void* src);

template <typename D, typename S>
void cast_row(std::array<std::byte*, 2> p, std::int64_t n, std::array<std::int64_t, 2> step) {
  if (step[0] == static_cast<std::int64_t>(sizeof(D)) && step[1] == static_cast<std::int64_t>(sizeof(S))) {
    // Both dense: memcpy for a plain copy, a vector kernel where one exists.
    if constexpr (std::is_same_v<D, S>) {
      std::memcpy(p[0], p[1], static_cast<std::size_t>(n) * sizeof(D));
    } else {
      cast_contiguous<D, S>(reinterpret_cast<D*>(p[0]), reinterpret_cast<const S*>(p[1]), n);
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    S v;
    std::memcpy(&v, p[1] + i * step[1], sizeof(S));
    const D out = detail::cast_element<D>(v);
    std::memcpy(p[0] + i * step[0], &out, sizeof(D));
  }
}

template <typename D, typename S>
void cast_one(void* dst, const void* src) {
  *static_cast<D*>(dst) = detail::cast_element<D>(*static_cast<const S*>(src));
}

template <template <typename, typename> class Pick, typename Fn>
Fn for_pair(DType dst, DType src) {
  return visit_dtype(src, [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    return visit_dtype(dst, [&](auto dst_tag) -> Fn {
      using D = typename decltype(dst_tag)::type;
      return Pick<D, S>::fn;
    });
  });
}
template <typename D, typename S>
struct PickRow {
  static constexpr CastRow fn = &cast_row<D, S>;
};
template <typename D, typename S>
struct PickElement {
  static constexpr CastElement fn = &cast_one<D, S>;
};

// src's strides seen through dst's shape: 0 on broadcast dims.
Shape broadcast_strides(const Tensor& src, const Shape& shape) {
  Shape st(shape.size(), 0);
  const std::size_t lead = shape.size() - src.shape().size();
  for (std::size_t i = 0; i < src.shape().size(); ++i)
    st[lead + i] = src.shape()[i] == 1 ? 0 : src.strides()[i];
  return st;
}

}  // namespace

namespace detail {

void check_scalar_fits(double value, DType dtype, const char* op) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const double lo = static_cast<double>(std::numeric_limits<T>::min());
      const double hi = static_cast<double>(std::numeric_limits<T>::max());
      // For 64-bit types hi rounds up to 2^64 or 2^63, which no integer of the type reaches.
      const bool fits = sizeof(T) == 8 ? value >= lo && value < hi : value >= lo && value <= hi;
      LMCORE_CHECK(fits, "{}: value {} cannot be converted to {} without overflow ({} holds {} to {})", op, value,
                   dtype_name(dtype), dtype_name(dtype), std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    }
  });
}

}  // namespace detail

void copy_cast(const Tensor& src, Tensor& dst) {
  check_copy_args(src, dst, "copy_cast");
  dst.check_writable("copy_cast");
  const Shape src_strides = broadcast_strides(src, dst.shape());
  const std::array<std::size_t, 2> itemsizes{dst.itemsize(), src.itemsize()};
  auto* dst_base = static_cast<std::byte*>(dst.data_ptr());
  auto* src_base = static_cast<std::byte*>(src.data_ptr());
  const CastRow row = for_pair<PickRow, CastRow>(dst.dtype(), src.dtype());
  internal::for_each_row<2>(dst.shape(), {dst.strides(), src_strides}, {dst_base, src_base}, itemsizes, row);
}

void copy_cast_reference(const Tensor& src, Tensor& dst) {
  check_copy_args(src, dst, "copy_cast_reference");
  const Shape src_strides = broadcast_strides(src, dst.shape());
  const std::int64_t n = dst.numel();
  const std::int64_t nd = dst.dim();
  Shape idx(nd, 0);
  const CastElement one = for_pair<PickElement, CastElement>(dst.dtype(), src.dtype());
  const auto* sp = static_cast<const std::byte*>(src.data_ptr());
  auto* dp = static_cast<std::byte*>(dst.data_ptr());
  const auto src_size = static_cast<std::int64_t>(src.itemsize()), dst_size = static_cast<std::int64_t>(dst.itemsize());
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t so = 0, dof = 0;
    for (std::int64_t d = 0; d < nd; ++d) {
      so += idx[d] * src_strides[d];
      dof += idx[d] * dst.strides()[d];
    }
    one(dp + dof * dst_size, sp + so * src_size);
    for (std::int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < dst.shape()[d]) break;
      idx[d] = 0;
    }
  }
}

void cast_f32_to_lowp(DType lowp, void* dst, const float* src, std::int64_t n) {
  LMCORE_CHECK(lowp == DType::bf16 || lowp == DType::f16, "cast_f32_to_lowp: expected bf16 or f16, found {}", lowp);
  if (lowp == DType::bf16) cast_contiguous(static_cast<bf16*>(dst), src, n);
  else cast_contiguous(static_cast<f16*>(dst), src, n);
}

void cast_lowp_to_f32(DType lowp, float* dst, const void* src, std::int64_t n) {
  LMCORE_CHECK(lowp == DType::bf16 || lowp == DType::f16, "cast_lowp_to_f32: expected bf16 or f16, found {}", lowp);
  if (lowp == DType::bf16) cast_contiguous(dst, static_cast<const bf16*>(src), n);
  else cast_contiguous(dst, static_cast<const f16*>(src), n);
}

}  // namespace lmcore
