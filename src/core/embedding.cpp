// Embedding forward (row copies) and backward (bucketed, deterministic row sums).
#include "lmcore/core/embedding.h"

#include <cstring>
#include <vector>

#include "lmcore/core/parallel.h"
#include "src/core/cast_kernels.h"
#include "src/core/op_util.h"

namespace lmcore {
namespace {

// Flat i64 copy of the ids, each checked against [0, num_weights).
std::vector<std::int64_t> checked_ids(const Tensor& indices, std::int64_t num_weights, const char* op) {
  detail::check_defined(indices, op, "indices");
  LMCORE_CHECK(indices.dtype() == DType::i64 || indices.dtype() == DType::i32,
               "{}: argument 'indices' expected dtype i64 or i32, found {}", op, indices.dtype());
  const std::vector<std::int64_t> ids = indices.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= num_weights)
      fail("{}: argument 'indices' has value {} at flat position {} (shape {}), out of range: expected 0 <= index < {}"
           " (the number of embeddings)",
           op, ids[i], i, shape_str(indices.shape()), num_weights);
  return ids;
}

std::optional<std::int64_t> wrap_padding(std::optional<std::int64_t> padding_idx, std::int64_t num_weights,
                                         const char* op) {
  if (!padding_idx.has_value()) return std::nullopt;
  const std::int64_t p = *padding_idx < 0 ? *padding_idx + num_weights : *padding_idx;
  LMCORE_CHECK(p >= 0 && p < num_weights, "{}: argument 'padding_idx' = {} is out of range, expected {} <= padding_idx < {}",
               op, *padding_idx, -num_weights, num_weights);
  return p;
}

template <typename T>
using grad_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx) {
  detail::check_defined(weight, "embedding", "weight");
  LMCORE_CHECK(weight.dim() == 2, "embedding: argument 'weight' expected 2 dims [V, D], found shape {}",
               shape_str(weight.shape()));
  const std::int64_t V = weight.size(0), D = weight.size(1);
  (void)wrap_padding(padding_idx, V, "embedding");
  const std::vector<std::int64_t> ids = checked_ids(indices, V, "embedding");
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  if (n == 0 || D == 0) return out;
  const std::size_t item = weight.itemsize();
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  const auto* src = static_cast<const std::byte*>(weight.data_ptr());
  const std::int64_t rs = weight.stride(0), cs = weight.stride(1);
  const std::int64_t row_bytes = D * static_cast<std::int64_t>(item);
  parallel_for(0, n, std::max<std::int64_t>(1, 16384 / D), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      const std::byte* row = src + ids[static_cast<std::size_t>(i)] * rs * static_cast<std::int64_t>(item);
      std::byte* o = dst + i * row_bytes;
      if (cs == 1) {
        std::memcpy(o, row, static_cast<std::size_t>(row_bytes));
      } else {
        for (std::int64_t j = 0; j < D; ++j)
          std::memcpy(o + j * static_cast<std::int64_t>(item), row + j * cs * static_cast<std::int64_t>(item), item);
      }
    }
  });
  return out;
}

namespace {

// The validated arguments of a backward call: padding row, ids as int64, row width D and count n.
struct BackwardArgs {
  std::optional<std::int64_t> pad;
  std::vector<std::int64_t> ids;
  std::int64_t D = 0, n = 0;
};

BackwardArgs check_backward_args(const Tensor& grad_output, const Tensor& indices, std::int64_t num_weights,
                                 std::optional<std::int64_t> padding_idx, const char* op) {
  detail::check_floating(grad_output, op, "grad_output");
  detail::check_defined(indices, op, "indices");
  LMCORE_CHECK(num_weights >= 0, "{}: argument 'num_weights' expected >= 0, found {}", op, num_weights);
  LMCORE_CHECK(grad_output.dim() == indices.dim() + 1,
               "{}: argument 'grad_output' expected shape [*indices.shape, D] = {} + [D], found {}", op,
               shape_str(indices.shape()), shape_str(grad_output.shape()));
  for (std::int64_t k = 0; k < indices.dim(); ++k)
    LMCORE_CHECK(grad_output.size(k) == indices.size(k),
                 "{}: argument 'grad_output' expected shape {} + [D], found {} (dim {}: {} vs {})", op,
                 shape_str(indices.shape()), shape_str(grad_output.shape()), k, grad_output.size(k), indices.size(k));
  BackwardArgs a;
  a.pad = wrap_padding(padding_idx, num_weights, op);
  a.ids = checked_ids(indices, num_weights, op);
  a.D = grad_output.size(-1);
  a.n = static_cast<std::int64_t>(a.ids.size());
  return a;
}

}  // namespace

Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, std::int64_t num_weights,
                          std::optional<std::int64_t> padding_idx, bool scale_grad_by_freq) {
  // Named copies, not structured bindings: lambdas below capture them (clang 14 can't capture bindings).
  const BackwardArgs args = check_backward_args(grad_output, indices, num_weights, padding_idx, "embedding_backward");
  const std::optional<std::int64_t> pad = args.pad;
  const std::vector<std::int64_t>& ids = args.ids;
  const std::int64_t D = args.D, n = args.n;
  Tensor grad = grad_output.reshape({n, D}).contiguous();
  Tensor out = Tensor::empty({num_weights, D}, grad_output.dtype());

  // 1. Bucket positions by id (counting sort): start[v] .. start[v + 1] in `order`, positions ascending.
  std::vector<std::int64_t> start(static_cast<std::size_t>(num_weights) + 1, 0);
  for (std::int64_t id : ids) ++start[static_cast<std::size_t>(id) + 1];
  for (std::int64_t v = 0; v < num_weights; ++v) start[static_cast<std::size_t>(v) + 1] += start[static_cast<std::size_t>(v)];
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  {
    std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
    for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(fill[static_cast<std::size_t>(ids[static_cast<std::size_t>(i)])]++)] = i;
  }

  // 2. Each weight row sums its bucket in a fixed order; rows are independent, so they run in parallel.
  visit_dtype(grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (detail::is_floating_v<T>) {
      using A = grad_acc_t<T>;
      const T* g = grad.data<T>();
      T* o = out.data<T>();
      const std::int64_t grain = std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(D, 1));
      parallel_for(0, num_weights, grain, [&](std::int64_t lo, std::int64_t hi) {
        std::vector<A> acc(static_cast<std::size_t>(D));
        std::vector<float> row_f32(std::is_same_v<T, bf16> || std::is_same_v<T, f16> ? static_cast<std::size_t>(D) : 0);
        for (std::int64_t v = lo; v < hi; ++v) {
          T* orow = o + v * D;
          const std::int64_t b = start[static_cast<std::size_t>(v)], e = start[static_cast<std::size_t>(v) + 1];
          if (b == e || (pad.has_value() && v == *pad)) {
            std::memset(static_cast<void*>(orow), 0, static_cast<std::size_t>(D) * sizeof(T));
            continue;
          }
          std::fill(acc.begin(), acc.end(), A(0));
          for (std::int64_t t = b; t < e; ++t) {
            const T* grow = g + order[static_cast<std::size_t>(t)] * D;
            if constexpr (std::is_same_v<T, bf16>) {
              detail::cast_bf16_to_f32(row_f32.data(), grow, D);
              for (std::int64_t j = 0; j < D; ++j) acc[static_cast<std::size_t>(j)] += row_f32[static_cast<std::size_t>(j)];
            } else if constexpr (std::is_same_v<T, f16>) {
              detail::cast_f16_to_f32(row_f32.data(), grow, D);
              for (std::int64_t j = 0; j < D; ++j) acc[static_cast<std::size_t>(j)] += row_f32[static_cast<std::size_t>(j)];
            } else {
              for (std::int64_t j = 0; j < D; ++j) acc[static_cast<std::size_t>(j)] += grow[j];
            }
          }
          if (scale_grad_by_freq) {
            const A inv = A(1) / static_cast<A>(e - b);
            for (auto& a : acc) a *= inv;
          }
          if constexpr (std::is_same_v<T, bf16>) {
            detail::cast_f32_to_bf16(orow, acc.data(), D);
          } else if constexpr (std::is_same_v<T, f16>) {
            detail::cast_f32_to_f16(orow, acc.data(), D);
          } else {
            for (std::int64_t j = 0; j < D; ++j) orow[j] = acc[static_cast<std::size_t>(j)];
          }
        }
      });
    }
  });
  return out;
}

Tensor embedding_backward_reference(const Tensor& grad_output, const Tensor& indices, std::int64_t num_weights,
                                    std::optional<std::int64_t> padding_idx, bool scale_grad_by_freq) {
  // Named copies, not structured bindings: lambdas below capture them (clang 14 can't capture bindings).
  const BackwardArgs args = check_backward_args(grad_output, indices, num_weights, padding_idx, "embedding_backward_reference");
  const std::optional<std::int64_t> pad = args.pad;
  const std::vector<std::int64_t>& ids = args.ids;
  const std::int64_t D = args.D, n = args.n;
  const std::vector<double> g = grad_output.reshape({n, D}).to_vector<double>();
  std::vector<double> acc(static_cast<std::size_t>(num_weights * D), 0.0);
  std::vector<std::int64_t> count(static_cast<std::size_t>(num_weights), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t v = ids[static_cast<std::size_t>(i)];
    ++count[static_cast<std::size_t>(v)];
    if (pad.has_value() && v == *pad) continue;
    for (std::int64_t j = 0; j < D; ++j) acc[static_cast<std::size_t>(v * D + j)] += g[static_cast<std::size_t>(i * D + j)];
  }
  if (scale_grad_by_freq)
    for (std::int64_t v = 0; v < num_weights; ++v)
      for (std::int64_t j = 0; j < D; ++j)
        if (count[static_cast<std::size_t>(v)] > 0) acc[static_cast<std::size_t>(v * D + j)] /= static_cast<double>(count[static_cast<std::size_t>(v)]);
  return Tensor::from_vector(acc, {num_weights, D}).to(grad_output.dtype());
}

}  // namespace lmcore
