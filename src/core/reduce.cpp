// Reductions. Every op is planned the same way: the input is permuted so the kept dims come first and
// the reduced dims last, the reduced dims are made one dense run (copying only when their strides do
// not already allow it), and each output element is a reduction over one run of `inner` elements.
// Rows run in parallel, in many small chunks that the threads take in turn (parallel_for_balanced: a
// descheduled thread delays one chunk, not half the op); a few very long rows are cut into fixed
// chunks (independent of the thread count) whose partial results are combined in a fixed order, so
// results never depend on threads.
#include "lmcore/core/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lmcore/core/parallel.h"
#include "src/core/op_util.h"
#include "src/core/reduce_kernels.h"

namespace lmcore {
namespace {

constexpr std::int64_t kChunk = 1 << 16;  // elements per partial result when a row is split

struct Plan {
  Shape out_shape;       // final output shape (keepdim applied)
  Shape kept_shape;      // sizes of the kept dims, in order
  Shape kept_strides;    // strides (elements) of the kept dims in `x`
  Tensor x;              // the input, with the reduced elements of each row dense
  std::int64_t outer = 1, inner = 1;
};

// True when dims `ds` of t, in order, form one dense run (stride 1 innermost).
bool dense_run(const Tensor& t, const std::vector<std::int64_t>& ds) {
  std::int64_t expected = 1;
  for (auto it = ds.rbegin(); it != ds.rend(); ++it) {
    if (t.size(*it) == 1) continue;
    if (t.stride(*it) != expected) return false;
    expected *= t.size(*it);
  }
  return true;
}

// True when the kept dims of x form one dense run and the reduction is better done column-wise (see
// outer_sum) than by making each reduced run dense.
bool fits_outer(const Tensor& x, const std::vector<std::int64_t>& red, std::int64_t outer, std::int64_t inner) {
  std::vector<std::int64_t> kept;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (std::find(red.begin(), red.end(), d) == red.end()) kept.push_back(d);
  return !kept.empty() && outer >= 16 && inner >= 2 && !dense_run(x, red) && dense_run(x, kept);
}

// `allow_outer`: the caller handles the fits_outer layout itself, so no dense copy is made for it.
Plan make_plan(const Tensor& x, const std::vector<std::int64_t>& red, bool keepdim, bool allow_outer = false) {
  Plan p;
  const std::int64_t nd = x.dim();
  std::vector<bool> is_red(static_cast<std::size_t>(nd), false);
  for (auto d : red) is_red[static_cast<std::size_t>(d)] = true;
  Shape perm;
  std::vector<std::int64_t> red_in_perm;
  for (std::int64_t d = 0; d < nd; ++d) {
    if (!is_red[static_cast<std::size_t>(d)]) {
      perm.push_back(d);
      p.kept_shape.push_back(x.size(d));
      p.out_shape.push_back(x.size(d));
    } else if (keepdim) {
      p.out_shape.push_back(1);
    }
  }
  for (auto d : red) {
    red_in_perm.push_back(static_cast<std::int64_t>(perm.size()));
    perm.push_back(d);
  }
  Tensor xp = x.permute(perm);
  for (auto d : red) p.inner *= x.size(d);
  p.outer = checked_numel(p.kept_shape, "reduction");
  if (!dense_run(xp, red_in_perm) && !(allow_outer && fits_outer(x, red, p.outer, p.inner))) xp = xp.contiguous();
  p.x = xp;
  for (std::size_t i = 0; i < p.kept_shape.size(); ++i) p.kept_strides.push_back(xp.stride(static_cast<std::int64_t>(i)));
  return p;
}

// Calls chunk(row, lo, hi) -> Acc for the elements [lo, hi) of every row and returns one Acc per row,
// combining the chunks of a split row left to right.
template <typename Acc, typename ChunkFn, typename Combine>
std::vector<Acc> reduce_rows(const Plan& p, ChunkFn&& chunk, Combine&& combine) {
  std::vector<Acc> out(static_cast<std::size_t>(p.outer));
  const bool split = p.outer < 64 && p.inner >= 2 * kChunk;
  if (!split) {
    const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(p.inner, 1));
    parallel_for_balanced(0, p.outer, grain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t r = lo; r < hi; ++r) out[static_cast<std::size_t>(r)] = chunk(r, 0, p.inner);
    });
    return out;
  }
  const std::int64_t chunks = (p.inner + kChunk - 1) / kChunk;
  std::vector<Acc> partial(static_cast<std::size_t>(p.outer * chunks));
  parallel_for_balanced(0, p.outer * chunks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t t = lo; t < hi; ++t) {
      const std::int64_t r = t / chunks, c = t % chunks;
      partial[static_cast<std::size_t>(t)] = chunk(r, c * kChunk, std::min(p.inner, (c + 1) * kChunk));
    }
  });
  for (std::int64_t r = 0; r < p.outer; ++r) {
    Acc acc = partial[static_cast<std::size_t>(r * chunks)];
    for (std::int64_t c = 1; c < chunks; ++c) acc = combine(acc, partial[static_cast<std::size_t>(r * chunks + c)]);
    out[static_cast<std::size_t>(r)] = acc;
  }
  return out;
}

template <typename T>
const T* row_ptr(const Plan& p, std::int64_t r) {
  return static_cast<const T*>(p.x.data_ptr()) + detail::offset_of(r, p.kept_shape, p.kept_strides);
}

// Accumulator type of a sum over T.
template <typename T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, std::int64_t>;

// Dense sum of one run, vectorised where Highway has a kernel.
template <typename T>
sum_acc_t<T> sum_run(const T* q, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) return detail::reduce_sum_f32(q, n);
  else if constexpr (std::is_same_v<T, bf16>) return detail::reduce_sum_bf16(q, n);
  else if constexpr (std::is_same_v<T, f16>) return detail::reduce_sum_f16(q, n);
  else if constexpr (std::is_same_v<T, double>) return detail::reduce_sum_f64(q, n);
  else {
    // Integers and bool: wrapping i64 arithmetic, as torch (unsigned to avoid UB on overflow).
    std::uint64_t acc = 0;
    for (std::int64_t i = 0; i < n; ++i) acc += static_cast<std::uint64_t>(static_cast<std::int64_t>(q[i]));
    return static_cast<std::int64_t>(acc);
  }
}

// NaN-propagating max/min of one dense run, n >= 1, in compute_t<T>.
template <bool kMax, typename T>
compute_t<T> extremum_run(const T* q, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return kMax ? detail::reduce_max_f32(q, n) : detail::reduce_min_f32(q, n);
  } else if constexpr (std::is_same_v<T, bf16>) {
    return kMax ? detail::reduce_max_bf16(q, n) : detail::reduce_min_bf16(q, n);
  } else {
    compute_t<T> best = load_as_compute(q[0]);
    for (std::int64_t i = 1; i < n; ++i) {
      const compute_t<T> v = load_as_compute(q[i]);
      if constexpr (std::is_floating_point_v<compute_t<T>>) {
        if (std::isnan(v)) return v;
      }
      best = kMax ? (v > best ? v : best) : (v < best ? v : best);
    }
    return best;
  }
}

template <typename T>
bool is_nan_value(compute_t<T> v) {
  if constexpr (std::is_floating_point_v<compute_t<T>>) return std::isnan(v); else return false;
}

Tensor finish(const Plan& p, Tensor out_contig) { return out_contig.view(p.out_shape); }

void check_nonempty(const Plan& p, const Tensor& x, const char* op) {
  LMCORE_CHECK(p.inner > 0 || p.outer == 0,
               "{}: expected a non-empty reduction, found input of shape {} reducing over zero elements "
               "(torch: 'Expected reduction dim to have non-zero size')",
               op, shape_str(x.shape()));
}

template <bool kMax>
Tensor extremum(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  detail::check_computable(x, op, "input");
  const Plan p = make_plan(x, detail::normalize_dims(dims, x.dim(), op), keepdim);
  check_nonempty(p, x, op);
  Tensor out = Tensor::empty(p.kept_shape, x.dtype());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      using C = compute_t<T>;
      auto rows = reduce_rows<C>(
          p, [&](std::int64_t r, std::int64_t lo, std::int64_t hi) { return extremum_run<kMax>(row_ptr<T>(p, r) + lo, hi - lo); },
          [](C a, C b) {
            if (is_nan_value<T>(a)) return a;
            if (is_nan_value<T>(b)) return b;
            return kMax ? (b > a ? b : a) : (b < a ? b : a);
          });
      T* o = out.data<T>();
      for (std::int64_t r = 0; r < p.outer; ++r) o[r] = store_from_compute<T>(rows[static_cast<std::size_t>(r)]);
    }
  });
  return finish(p, out);
}

// Sum over "outer" dims: when the kept dims form one dense run (e.g. summing [N, C] over dim 0, the
// bias-gradient shape), each output column is accumulated across the reduced positions with the
// columns as the vector dimension, instead of transposing the input first. Rows are added in blocks of
// kRowBlock into a block sum that is then added to the total, so the rounding error grows like
// R / kRowBlock + kRowBlock rather than R. Each column's order of additions is fixed, so the result
// does not depend on how columns are split over threads. Returns false when the layout does not fit.
template <typename T>
bool outer_sum(const Tensor& x, const std::vector<std::int64_t>& red, const Plan& p, Tensor& out, bool divide) {
  if (!fits_outer(x, red, p.outer, p.inner)) return false;
  Shape rsizes, rstrides;
  for (auto d : red) {
    rsizes.push_back(x.size(d));
    rstrides.push_back(x.stride(d));
  }
  using A = sum_acc_t<T>;
  // kCols columns per pass: wide enough that each row contributes a long contiguous stretch (few
  // pages touched per row), small enough that the two accumulator rows stay in L1/L2.
  constexpr std::int64_t kRowBlock = 128, kCols = 4096;
  const T* base = static_cast<const T*>(x.data_ptr());
  const std::int64_t K = p.outer, R = p.inner;
  std::vector<std::int64_t> row_off(static_cast<std::size_t>(R));
  for (std::int64_t r = 0; r < R; ++r) row_off[static_cast<std::size_t>(r)] = detail::offset_of(r, rsizes, rstrides);
  // Blocks of kCols columns taken one at a time: a thread that is descheduled holds up one block, not
  // half the columns (narrower blocks measured slower: 16384 columns in blocks of 1024, 0.8x).
  parallel_for_balanced(0, K, std::max<std::int64_t>(kCols, 65536 / R), [&](std::int64_t lo, std::int64_t hi) {
    std::vector<A> total_buf(static_cast<std::size_t>(std::min(kCols, hi - lo))), block_buf(total_buf.size());
    A* total = total_buf.data();
    A* block = block_buf.data();
    for (std::int64_t c0 = lo; c0 < hi; c0 += kCols) {
      const std::int64_t w = std::min(kCols, hi - c0);
      std::fill(total, total + w, A(0));
      for (std::int64_t r0 = 0; r0 < R; r0 += kRowBlock) {
        std::fill(block, block + w, A(0));
        const std::int64_t r1 = std::min(R, r0 + kRowBlock);
        std::int64_t r = r0;
        if constexpr (!std::is_integral_v<A>) {
          // Four rows a pass: a quarter of the accumulator loads and stores, which bounded the loop
          // (f32 [1024, 16384] over dim 0 on Zen 5, 2 threads: 0.90-0.93x torch before, 1.84-1.93x after).
          for (; r + 4 <= r1; r += 4) {
            const T* q0 = base + row_off[static_cast<std::size_t>(r)] + c0;
            const T* q1 = base + row_off[static_cast<std::size_t>(r + 1)] + c0;
            const T* q2 = base + row_off[static_cast<std::size_t>(r + 2)] + c0;
            const T* q3 = base + row_off[static_cast<std::size_t>(r + 3)] + c0;
            for (std::int64_t j = 0; j < w; ++j)
              block[j] += (load_as_compute(q0[j]) + load_as_compute(q1[j])) +
                          (load_as_compute(q2[j]) + load_as_compute(q3[j]));
          }
        }
        for (; r < r1; ++r) {
          const T* q = base + row_off[static_cast<std::size_t>(r)] + c0;
          if constexpr (std::is_integral_v<A>) {
            for (std::int64_t j = 0; j < w; ++j)
              block[j] = static_cast<A>(static_cast<std::uint64_t>(block[j]) + static_cast<std::uint64_t>(static_cast<std::int64_t>(q[j])));
          } else {
            for (std::int64_t j = 0; j < w; ++j) block[j] += load_as_compute(q[j]);
          }
        }
        for (std::int64_t j = 0; j < w; ++j) {
          if constexpr (std::is_integral_v<A>) total[j] = static_cast<A>(static_cast<std::uint64_t>(total[j]) + static_cast<std::uint64_t>(block[j]));
          else total[j] += block[j];
        }
      }
      for (std::int64_t j = 0; j < w; ++j) {
        if constexpr (std::is_integral_v<A>) {
          out.data<std::int64_t>()[c0 + j] = total[j];
        } else {
          out.data<T>()[c0 + j] = store_from_compute<T>(divide ? total[j] / static_cast<A>(R) : total[j]);
        }
      }
    }
  });
  return true;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  detail::check_computable(x, "sum", "input");
  const std::vector<std::int64_t> red = detail::normalize_dims(dims, x.dim(), "sum");
  const Plan p = make_plan(x, red, keepdim, /*allow_outer=*/true);
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor out = Tensor::empty(p.kept_shape, out_dtype);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T>) {
      if (outer_sum<T>(x, red, p, out, false)) return;
      using A = sum_acc_t<T>;
      auto rows = reduce_rows<A>(
          p, [&](std::int64_t r, std::int64_t lo, std::int64_t hi) { return sum_run(row_ptr<T>(p, r) + lo, hi - lo); },
          [](A a, A b) {
            if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
            else return a + b;
          });
      if constexpr (std::is_integral_v<A>) {
        std::int64_t* o = out.data<std::int64_t>();
        for (std::int64_t r = 0; r < p.outer; ++r) o[r] = rows[static_cast<std::size_t>(r)];
      } else {
        T* o = out.data<T>();
        for (std::int64_t r = 0; r < p.outer; ++r) o[r] = store_from_compute<T>(rows[static_cast<std::size_t>(r)]);
      }
    }
  });
  return finish(p, out);
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  detail::check_floating(x, "mean", "input");
  const std::vector<std::int64_t> red = detail::normalize_dims(dims, x.dim(), "mean");
  const Plan p = make_plan(x, red, keepdim, /*allow_outer=*/true);
  Tensor out = Tensor::empty(p.kept_shape, x.dtype());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (detail::is_floating_v<T>) {
      if (outer_sum<T>(x, red, p, out, true)) return;
      using A = compute_t<T>;
      auto rows = reduce_rows<A>(
          p, [&](std::int64_t r, std::int64_t lo, std::int64_t hi) { return sum_run(row_ptr<T>(p, r) + lo, hi - lo); },
          [](A a, A b) { return a + b; });
      T* o = out.data<T>();
      const A n = static_cast<A>(p.inner);
      for (std::int64_t r = 0; r < p.outer; ++r) o[r] = store_from_compute<T>(rows[static_cast<std::size_t>(r)] / n);
    }
  });
  return finish(p, out);
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return extremum<true>(x, dims, keepdim, "amax"); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return extremum<false>(x, dims, keepdim, "amin"); }

Tensor logsumexp(const Tensor& x_in, const Shape& dims, bool keepdim) {
  detail::check_computable(x_in, "logsumexp", "input");
  // Integers and bool are computed in f32, as torch's default dtype.
  const Tensor x = is_floating(x_in.dtype()) ? x_in : x_in.to(DType::f32);
  const Plan p = make_plan(x, detail::normalize_dims(dims, x.dim(), "logsumexp"), keepdim);
  Tensor out = Tensor::empty(p.kept_shape, x.dtype());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (detail::is_floating_v<T>) {
      using C = compute_t<T>;
      constexpr C kInf = std::numeric_limits<C>::infinity();
      // Pass 1: the max of each row (NaN propagating), the shift that keeps exp() from overflowing.
      std::vector<C> shift(static_cast<std::size_t>(p.outer), -kInf);
      if (p.inner > 0) {
        shift = reduce_rows<C>(
            p, [&](std::int64_t r, std::int64_t lo, std::int64_t hi) { return extremum_run<true>(row_ptr<T>(p, r) + lo, hi - lo); },
            [](C a, C b) { return std::isnan(a) ? a : (std::isnan(b) ? b : (b > a ? b : a)); });
      }
      // An infinite max is not a usable shift (inf - inf = NaN); torch uses 0 there. A +inf max makes
      // the result +inf, which the vector exp (valid up to ~88) is not asked to produce.
      const std::vector<C> raw_max = shift;
      for (auto& s : shift)
        if (std::isinf(s)) s = 0;
      // Pass 2: sum of exp(x - shift).
      auto sums = reduce_rows<C>(
          p,
          [&](std::int64_t r, std::int64_t lo, std::int64_t hi) -> C {
            const T* q = row_ptr<T>(p, r) + lo;
            const C s = shift[static_cast<std::size_t>(r)];
            if constexpr (std::is_same_v<T, float>) {
              if (!std::isnan(s)) return detail::reduce_sum_exp_f32(q, hi - lo, s);
            }
            C acc = 0;
            for (std::int64_t i = 0; i < hi - lo; ++i) acc += std::exp(load_as_compute(q[i]) - s);
            return acc;
          },
          [](C a, C b) { return a + b; });
      T* o = out.data<T>();
      for (std::int64_t r = 0; r < p.outer; ++r) {
        const C s = shift[static_cast<std::size_t>(r)];
        const C m = raw_max[static_cast<std::size_t>(r)];
        const C v = std::isnan(s) ? s : (m == kInf ? kInf : std::log(sums[static_cast<std::size_t>(r)]) + s);
        o[r] = store_from_compute<T>(v);
      }
    }
  });
  return finish(p, out);
}

namespace {

template <bool kMax>
Tensor arg_extremum(const Tensor& x, std::optional<std::int64_t> dim, bool keepdim, const char* op) {
  detail::check_computable(x, op, "input");
  LMCORE_CHECK(x.dtype() != DType::boolean, "{}: argument 'input' has dtype bool, expected a numeric dtype (as torch)",
               op);
  Tensor src = x;
  std::vector<std::int64_t> red;
  if (dim.has_value()) {
    red = {wrap_dim(*dim, std::max<std::int64_t>(x.dim(), 1), op)};
    if (x.dim() == 0) red.clear();
  } else {
    src = x.reshape({-1});
    red = {0};
  }
  Plan p = make_plan(src, red, dim.has_value() ? keepdim : false);
  if (!dim.has_value() && keepdim) p.out_shape = Shape(static_cast<std::size_t>(x.dim()), 1);
  check_nonempty(p, x, op);
  Tensor out = Tensor::empty(p.kept_shape, DType::i64);
  visit_dtype(src.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::is_storage_only_v<T> && !std::is_same_v<T, bool>) {
      using C = compute_t<T>;
      struct Best {
        C value;
        std::int64_t index;
      };
      auto rows = reduce_rows<Best>(
          p,
          [&](std::int64_t r, std::int64_t lo, std::int64_t hi) {
            const T* q = row_ptr<T>(p, r);
            Best b{load_as_compute(q[lo]), lo};
            if (is_nan_value<T>(b.value)) return b;
            for (std::int64_t i = lo + 1; i < hi; ++i) {
              const C v = load_as_compute(q[i]);
              if (is_nan_value<T>(v)) return Best{v, i};
              if (kMax ? v > b.value : v < b.value) b = Best{v, i};
            }
            return b;
          },
          [](Best a, Best b) {
            // Chunks arrive left to right: keep the earlier on ties, and the first NaN.
            if (is_nan_value<T>(a.value)) return a;
            if (is_nan_value<T>(b.value)) return b;
            return (kMax ? b.value > a.value : b.value < a.value) ? b : a;
          });
      std::int64_t* o = out.data<std::int64_t>();
      for (std::int64_t r = 0; r < p.outer; ++r) o[r] = rows[static_cast<std::size_t>(r)].index;
    }
  });
  return finish(p, out);
}

}  // namespace

Tensor argmax(const Tensor& x, std::optional<std::int64_t> dim, bool keepdim) {
  return arg_extremum<true>(x, dim, keepdim, "argmax");
}
Tensor argmin(const Tensor& x, std::optional<std::int64_t> dim, bool keepdim) {
  return arg_extremum<false>(x, dim, keepdim, "argmin");
}

}  // namespace lmcore
