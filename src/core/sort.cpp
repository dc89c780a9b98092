// Sort and topk. Each element becomes an unsigned key whose integer order is torch's order (see
// sort_key); rows are then sorted by key with an LSD radix sort that carries each element's position,
// which is stable by construction. Descending order uses the complemented key, which keeps ties in
// input order as torch's stable descending sort does.
#include "lmcore/core/sort.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "lmcore/core/parallel.h"
#include "src/core/op_util.h"

namespace lmcore {
namespace {

template <std::size_t Bytes> struct UIntOf;
template <> struct UIntOf<1> { using type = std::uint8_t; };
template <> struct UIntOf<2> { using type = std::uint16_t; };
template <> struct UIntOf<4> { using type = std::uint32_t; };
template <> struct UIntOf<8> { using type = std::uint64_t; };

template <typename T>
using key_t = typename UIntOf<sizeof(T)>::type;

// An unsigned key with key(a) < key(b) exactly when torch orders a before b ascending, and equal keys
// for elements torch considers equal: floats map sign-magnitude to offset order (negative values
// complemented), -0.0 becomes +0.0, and every NaN becomes the all-ones key, above +inf.
template <typename T>
key_t<T> sort_key(T v) {
  using K = key_t<T>;
  constexpr K sign = K(1) << (8 * sizeof(K) - 1);
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<K>(v ? 1 : 0);
  } else if constexpr (std::is_integral_v<T>) {
    K bits;
    std::memcpy(&bits, &v, sizeof(K));
    return std::is_signed_v<T> ? static_cast<K>(bits ^ sign) : bits;
  } else {
    if (std::isnan(load_as_compute(v))) return static_cast<K>(~K(0));
    K bits;
    std::memcpy(&bits, &v, sizeof(K));
    if (bits == sign) bits = 0;  // -0.0 == +0.0
    return (bits & sign) ? static_cast<K>(~bits) : static_cast<K>(bits | sign);
  }
}

template <typename K>
struct Item {
  K key;
  std::uint32_t pos;
};

// Stable LSD radix sort of items by key, 8 bits per pass; a pass whose digit is the same in every key
// is skipped (common for small integers and for floats of one sign and similar magnitude).
template <typename K>
void radix_sort(std::vector<Item<K>>& items, std::vector<Item<K>>& tmp) {
  const std::size_t n = items.size();
  if (n <= 32) {
    // Insertion sort: stable and faster than the passes below for short rows.
    for (std::size_t i = 1; i < n; ++i) {
      const Item<K> it = items[i];
      std::size_t j = i;
      while (j > 0 && items[j - 1].key > it.key) {
        items[j] = items[j - 1];
        --j;
      }
      items[j] = it;
    }
    return;
  }
  constexpr std::size_t kPasses = sizeof(K);
  std::array<std::array<std::uint32_t, 256>, kPasses> hist{};
  for (const auto& it : items)
    for (std::size_t p = 0; p < kPasses; ++p) ++hist[p][(it.key >> (8 * p)) & 0xFF];
  tmp.resize(n);
  for (std::size_t p = 0; p < kPasses; ++p) {
    auto& h = hist[p];
    if (h[(items[0].key >> (8 * p)) & 0xFF] == n) continue;  // one digit everywhere
    std::uint32_t sum = 0;
    for (auto& c : h) {
      const std::uint32_t c0 = c;
      c = sum;
      sum += c0;
    }
    for (const auto& it : items) tmp[h[(it.key >> (8 * p)) & 0xFF]++] = it;
    items.swap(tmp);
  }
}

struct RowLayout {
  Tensor x;            // input with `dim` moved last
  Shape outer_shape;   // the other dims
  Shape outer_strides;
  std::int64_t n = 0, stride = 0, rows = 0;
};

RowLayout row_layout(const Tensor& x, std::int64_t d) {
  RowLayout L;
  Shape perm;
  for (std::int64_t k = 0; k < x.dim(); ++k)
    if (k != d) perm.push_back(k);
  if (x.dim() > 0) perm.push_back(d);
  L.x = x.dim() > 0 ? x.permute(perm) : x.reshape({1});
  L.n = L.x.size(-1);
  L.stride = L.x.stride(-1);
  for (std::int64_t k = 0; k + 1 < L.x.dim(); ++k) {
    L.outer_shape.push_back(L.x.size(k));
    L.outer_strides.push_back(L.x.stride(k));
  }
  L.rows = checked_numel(L.outer_shape, "sort");
  return L;
}

// Writes result rows (length m) into values/indices laid out like x with dim moved last.
struct RowOutput {
  Tensor values, indices;    // final tensors, input's dim order
  Tensor values_p, indices_p;  // views with dim last
};

RowOutput make_output(const Tensor& x, std::int64_t d, std::int64_t m) {
  RowOutput o;
  Shape shape = x.shape();
  if (!shape.empty()) shape[static_cast<std::size_t>(d)] = m;
  o.values = Tensor::empty(shape, x.dtype());
  o.indices = Tensor::empty(shape, DType::i64);
  Shape perm;
  for (std::int64_t k = 0; k < x.dim(); ++k)
    if (k != d) perm.push_back(k);
  if (x.dim() > 0) perm.push_back(d);
  o.values_p = x.dim() > 0 ? o.values.permute(perm) : o.values.reshape({1});
  o.indices_p = x.dim() > 0 ? o.indices.permute(perm) : o.indices.reshape({1});
  return o;
}

// Sorts each row's keys (complemented for descending) and hands the sorted items to emit(row, items).
template <typename T, typename Emit>
void sort_rows(const RowLayout& L, bool descending, Emit&& emit) {
  using K = key_t<T>;
  LMCORE_CHECK(L.n <= static_cast<std::int64_t>(UINT32_MAX), "sort: rows longer than 2^32 - 1 elements ({}) are not supported", L.n);
  const T* base = static_cast<const T*>(L.x.data_ptr());
  const std::int64_t grain = std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(L.n, 1));
  parallel_for(0, L.rows, grain, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<Item<K>> items(static_cast<std::size_t>(L.n)), tmp;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* row = base + detail::offset_of(r, L.outer_shape, L.outer_strides);
      for (std::int64_t i = 0; i < L.n; ++i) {
        const K k = sort_key(row[i * L.stride]);
        items[static_cast<std::size_t>(i)] = {descending ? static_cast<K>(~k) : k, static_cast<std::uint32_t>(i)};
      }
      emit(r, row, items, tmp);
    }
  });
}

// Orders each row's (key, position) items with `arrange`, then writes the first `count` values and
// their positions into the output row: the one write-out that sort() and topk() share.
template <typename Arrange>
void write_ordered_rows(const Tensor& x, const RowLayout& L, RowOutput& o, std::int64_t count, bool descending,
                        Arrange&& arrange) {
  const Shape vs(o.values_p.strides().begin(), o.values_p.strides().end() - 1);
  const Shape is(o.indices_p.strides().begin(), o.indices_p.strides().end() - 1);
  const std::int64_t vstep = o.values_p.stride(-1), istep = o.indices_p.stride(-1);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      T* vbase = static_cast<T*>(o.values_p.data_ptr());
      std::int64_t* ibase = static_cast<std::int64_t*>(o.indices_p.data_ptr());
      sort_rows<T>(L, descending, [&](std::int64_t r, const T* row, auto& items, auto& tmp) {
        arrange(items, tmp);
        T* vrow = vbase + detail::offset_of(r, L.outer_shape, vs);
        std::int64_t* irow = ibase + detail::offset_of(r, L.outer_shape, is);
        for (std::int64_t i = 0; i < count; ++i) {
          const std::uint32_t p = items[static_cast<std::size_t>(i)].pos;
          vrow[i * vstep] = row[static_cast<std::int64_t>(p) * L.stride];
          irow[i * istep] = p;
        }
      });
    }
  });
}

}  // namespace

SortResult sort(const Tensor& x, std::int64_t dim, bool descending, bool stable) {
  (void)stable;  // always stable (see sort.h)
  detail::check_computable(x, "sort", "input");
  const std::int64_t d = wrap_dim(dim, std::max<std::int64_t>(x.dim(), 1), "sort");
  const RowLayout L = row_layout(x, d);
  RowOutput o = make_output(x, d, L.n);
  if (x.numel() == 0) return {o.values, o.indices};
  write_ordered_rows(x, L, o, L.n, descending, [](auto& items, auto& tmp) { radix_sort(items, tmp); });
  return {o.values, o.indices};
}

SortResult topk(const Tensor& x, std::int64_t k, std::int64_t dim, bool largest, bool sorted) {
  (void)sorted;  // always sorted (see sort.h)
  detail::check_computable(x, "topk", "input");
  LMCORE_CHECK(x.dtype() != DType::boolean, "topk: argument 'input' has dtype bool, expected a numeric dtype (as torch)");
  const std::int64_t d = wrap_dim(dim, std::max<std::int64_t>(x.dim(), 1), "topk");
  const RowLayout L = row_layout(x, d);
  LMCORE_CHECK(k >= 0 && k <= L.n, "topk: argument 'k' = {} is out of range, expected 0 <= k <= {} (size of dim {} of {})",
               k, L.n, d, shape_str(x.shape()));
  RowOutput o = make_output(x, d, k);
  if (o.values.numel() == 0) return {o.values, o.indices};
  write_ordered_rows(x, L, o, k, largest, [&](auto& items, auto& tmp) {
    using ItemT = typename std::decay_t<decltype(items)>::value_type;
    // (key, position) is a total order, so the k selected are the k first of a stable sort.
    auto before = [](const ItemT& a, const ItemT& b) { return a.key != b.key ? a.key < b.key : a.pos < b.pos; };
    if (4 * k < L.n) {
      std::nth_element(items.begin(), items.begin() + k, items.end(), before);
      std::sort(items.begin(), items.begin() + k, before);
    } else {
      radix_sort(items, tmp);
    }
  });
  return {o.values, o.indices};
}

SortResult sort_reference(const Tensor& x, std::int64_t dim, bool descending) {
  detail::check_computable(x, "sort_reference", "input");
  const std::int64_t d = wrap_dim(dim, std::max<std::int64_t>(x.dim(), 1), "sort_reference");
  const RowLayout L = row_layout(x, d);
  RowOutput o = make_output(x, d, L.n);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      using C = compute_t<T>;
      auto nan = [](C v) {
        if constexpr (std::is_floating_point_v<C>) return std::isnan(v); else return false;
      };
      for (std::int64_t r = 0; r < L.rows; ++r) {
        std::vector<C> vals(static_cast<std::size_t>(L.n));
        std::vector<std::int64_t> idx(static_cast<std::size_t>(L.n));
        const T* row = static_cast<const T*>(L.x.data_ptr()) + detail::offset_of(r, L.outer_shape, L.outer_strides);
        for (std::int64_t i = 0; i < L.n; ++i) vals[static_cast<std::size_t>(i)] = load_as_compute(row[i * L.stride]);
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
          const C va = vals[static_cast<std::size_t>(a)], vb = vals[static_cast<std::size_t>(b)];
          if (descending) return nan(va) ? !nan(vb) : (!nan(vb) && va > vb);
          return nan(vb) ? !nan(va) : (!nan(va) && va < vb);
        });
        Tensor vrow = o.values_p, irow = o.indices_p;
        for (std::int64_t i = 0; i < L.n; ++i) {
          Shape pos(L.outer_shape.size() + 1, 0);
          std::int64_t rem = r;
          for (std::int64_t k = static_cast<std::int64_t>(L.outer_shape.size()) - 1; k >= 0; --k) {
            pos[static_cast<std::size_t>(k)] = rem % L.outer_shape[static_cast<std::size_t>(k)];
            rem /= L.outer_shape[static_cast<std::size_t>(k)];
          }
          pos.back() = i;
          std::int64_t vo = 0, io = 0;
          for (std::size_t k = 0; k < pos.size(); ++k) {
            vo += pos[k] * vrow.strides()[k];
            io += pos[k] * irow.strides()[k];
          }
          const std::int64_t src = idx[static_cast<std::size_t>(i)];
          static_cast<T*>(vrow.data_ptr())[vo] = row[src * L.stride];
          static_cast<std::int64_t*>(irow.data_ptr())[io] = src;
        }
      }
    }
  });
  return {o.values, o.indices};
}

SortResult topk_reference(const Tensor& x, std::int64_t k, std::int64_t dim, bool largest) {
  const std::int64_t d = wrap_dim(dim, std::max<std::int64_t>(x.dim(), 1), "topk_reference");
  SortResult s = sort_reference(x, d, largest);
  if (x.dim() == 0) return s;
  return {s.values.narrow(d, 0, k).contiguous(), s.indices.narrow(d, 0, k).contiguous()};
}

}  // namespace lmcore
