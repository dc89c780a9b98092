// The row-parallel drivers of the model's layers; the SIMD bodies are in layer_kernels.cpp.
#include "lmcore/model/layers.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "lmcore/base/page_offset_buffer.h"
#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "src/model/layer_kernels.h"

namespace lmcore::model {

namespace {
// Rows per task: enough work per chunk that the pool's wake-up is paid for.
std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(cols, 1)); }
// Fewer rows than this read the caller's weight where it is: the copy would cost as much as it saves.
constexpr std::int64_t kStageRows = 16;
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, std::int64_t N, std::int64_t C,
                     float eps) {
  // The weight is read beside every output row: staged at the output's page offset (4K aliasing).
  std::optional<PageOffsetBuffer<float>> staged;
  if (N >= kStageRows) weight = staged.emplace(weight, static_cast<std::size_t>(C), out).data();
  parallel_for(0, N, row_grain(C), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t n = b; n < e; ++n) rstd[n] = detail::rmsnorm_row(out + n * C, inp + n * C, weight, C, eps);
  });
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, std::int64_t N, std::int64_t C) {
  // dweight sums over all rows: the rows are cut into k fixed chunks, each chunk sums into its own
  // partial, and the partials are added in chunk order, so the bits depend only on the thread count.
  // The partials are stored and the weight read beside every row of dinp, which is stored: both are
  // placed at the page offset of their chunk's first dinp row (4K aliasing).
  const std::int64_t k = std::max<std::int64_t>(1, std::min<std::int64_t>(num_threads(), N / row_grain(C)));
  std::vector<PageOffsetBuffer<float>> partial;
  for (std::int64_t c = 0; c < k; ++c) partial.emplace_back(static_cast<std::size_t>(C), dinp + c * N / k * C);
  std::optional<PageOffsetBuffer<float>> staged;
  if (N >= kStageRows) weight = staged.emplace(weight, static_cast<std::size_t>(C), dinp).data();
  parallel_for(0, k, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      float* dw = partial[c].data();
      for (std::int64_t n = c * N / k; n < (c + 1) * N / k; ++n)
        detail::rmsnorm_backward_row(dinp + n * C, dw, dout + n * C, inp + n * C, weight, rstd[n], C);
    }
  });
  for (std::int64_t c = 0; c < k; ++c) detail::add_row(dweight, partial[c].data(), C);
}

RopeTable RopeTable::make(std::int64_t max_seq, std::int64_t head_dim, double theta) {
  LMCORE_CHECK(head_dim % 2 == 0 && head_dim > 0, "RopeTable: head_dim must be even and positive, found {}", head_dim);
  RopeTable t;
  t.max_seq = max_seq;
  t.head_dim = head_dim;
  const std::int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(head_dim));
  t.cos.resize(static_cast<std::size_t>(max_seq * half));
  t.sin.resize(static_cast<std::size_t>(max_seq * half));
  for (std::int64_t p = 0; p < max_seq; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      t.cos[p * half + i] = std::cos(angle);
      t.sin[p * half + i] = std::sin(angle);
    }
  }
  return t;
}

namespace {
void rope_apply(float* x, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                const RopeTable& table, float sign) {
  LMCORE_CHECK(T <= table.max_seq, "rope: sequence length {} exceeds the table's {} positions", T, table.max_seq);
  const std::int64_t hd = table.head_dim, half = hd / 2;
  parallel_for(0, N, row_grain(n_heads * hd), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t n = b; n < e; ++n) {
      const std::int64_t t = n % T;
      const float* c = table.cos.data() + t * half;
      const float* s = table.sin.data() + t * half;
      for (std::int64_t h = 0; h < n_heads; ++h) detail::rope_head(x + n * row_stride + h * hd, c, s, half, sign);
    }
  });
}
}  // namespace

void rope_forward(float* x, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                  const RopeTable& table) {
  rope_apply(x, N, T, row_stride, n_heads, table, 1.0f);
}

void rope_backward(float* dx, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                   const RopeTable& table) {
  rope_apply(dx, N, T, row_stride, n_heads, table, -1.0f);
}

void swiglu_forward(float* out, const float* gu, std::int64_t N, std::int64_t F) {
  parallel_for(0, N, row_grain(F), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t n = b; n < e; ++n) detail::swiglu_row(out + n * F, gu + n * 2 * F, gu + n * 2 * F + F, F);
  });
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, std::int64_t N, std::int64_t F) {
  parallel_for(0, N, row_grain(F), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t n = b; n < e; ++n)
      detail::swiglu_backward_row(dgu + n * 2 * F, dgu + n * 2 * F + F, dout + n * F, gu + n * 2 * F,
                                  gu + n * 2 * F + F, F);
  });
}

void embedding_forward(float* out, const std::int32_t* tokens, const float* weight, std::int64_t N, std::int64_t C,
                       std::int64_t V) {
  for (std::int64_t n = 0; n < N; ++n)
    LMCORE_CHECK(tokens[n] >= 0 && tokens[n] < V, "embedding: token {} at position {} is outside [0, {})", tokens[n],
                 n, V);
  parallel_for(0, N, row_grain(C), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t n = b; n < e; ++n)
      std::memcpy(out + n * C, weight + static_cast<std::int64_t>(tokens[n]) * C, static_cast<std::size_t>(C) * 4);
  });
}

void embedding_backward(float* dweight, const float* dout, const std::int32_t* tokens, std::int64_t N, std::int64_t C,
                        std::int64_t V) {
  // Counting sort of the positions by token: bucket v holds the positions of token v in increasing order.
  std::vector<std::int64_t> start(static_cast<std::size_t>(V) + 1, 0);
  for (std::int64_t n = 0; n < N; ++n) {
    LMCORE_CHECK(tokens[n] >= 0 && tokens[n] < V, "embedding_backward: token {} at position {} is outside [0, {})",
                 tokens[n], n, V);
    ++start[static_cast<std::size_t>(tokens[n]) + 1];
  }
  std::vector<std::int32_t> present;
  for (std::int64_t v = 0; v < V; ++v) {
    if (start[v + 1] > 0) present.push_back(static_cast<std::int32_t>(v));
    start[v + 1] += start[v];
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(N));
  std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
  for (std::int64_t n = 0; n < N; ++n) order[fill[tokens[n]]++] = n;
  const std::int64_t rows = static_cast<std::int64_t>(present.size());
  parallel_for(0, rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(C, 1)), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::int32_t v = present[r];
      float* dst = dweight + static_cast<std::int64_t>(v) * C;
      for (std::int64_t j = start[v]; j < start[v + 1]; ++j) detail::add_row(dst, dout + order[j] * C, C);
    }
  });
}

}  // namespace lmcore::model
