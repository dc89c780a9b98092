// The flex attention forward kernel: per (b, query head, query block), an online softmax over the
// listed key blocks in increasing order, with tile products S = scale * Q K^T and O += P V (sgemm for
// f32, the matrix units for bf16 with P rounded to bf16 first; see flex_kernels.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "lmcore/core/copy.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "src/attention/flex_kernels.h"
#include "src/attention/row_kernels.h"

namespace lmcore::attention::detail {

namespace {

// Widest key span of one forward tile product (see flex_forward): 512 keys for sgemm, 2048 on the
// matrix units, where each oneDNN call re-blocks K and V and the online rescale runs once per span
// (L = 8192, H = 8, D = 64 on AMX, 2 threads: bf16 forward with a 1024-key window 63 -> 46 ms, causal
// 224 -> 187 ms; the tiles, 1.75 MB per thread, stay within L2).
constexpr std::int64_t kSpanColumns = 512, kLowpSpanColumns = 2048;

}  // namespace

template <typename T>
void flex_forward(const AttentionShape& sh, const FlexLayout& lay, const BlockMask& bm, const ScoreMod& score_mod,
                  const T* q, const T* k, const T* v, Acc<T>* out, Acc<T>* lse) {
  using A = Acc<T>;  // scores, softmax, accumulators: double for f64 inputs, float otherwise
  constexpr bool kLowp = !std::is_same_v<T, A>;
  const std::int64_t B = sh.batch, Hq = sh.q_heads, L = sh.q_len, S = sh.kv_len, D = sh.head_dim, Dv = sh.value_dim;
  const std::int64_t group = Hq / sh.kv_heads;
  const std::int64_t qb = bm.q_block, kb = bm.kv_block, nqb = bm.num_q_blocks;
  const std::int64_t items = B * Hq * nqb;
  const A ninf = -std::numeric_limits<A>::infinity();
  const A scale = static_cast<A>(sh.scale);

  // Items in decreasing cost so the dynamic schedule ends on small items; each item writes only its
  // own rows, so the schedule does not change any result bit.
  auto mask_row = [&](std::int64_t b, std::int64_t h, std::int64_t qi) {
    return ((bm.batch == 1 ? 0 : b) * bm.heads + (bm.heads == 1 ? 0 : h)) * nqb + qi;
  };
  std::vector<std::int64_t> order(static_cast<std::size_t>(items));
  std::vector<std::int64_t> cost(static_cast<std::size_t>(items));
  for (std::int64_t it = 0; it < items; ++it) {
    const std::int64_t qi = it % nqb, bh = it / nqb;
    const std::int64_t r = mask_row(bh / Hq, bh % Hq, qi);
    cost[static_cast<std::size_t>(it)] = 2 * bm.partial.blocks_in_row(r) + bm.full.blocks_in_row(r);
  }
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return cost[static_cast<std::size_t>(a)] > cost[static_cast<std::size_t>(b)];
  });

  // Consecutive listed key blocks are taken together as one span of up to kSpanColumns keys: one
  // wider sgemm per span instead of one per block (OpenBLAS repacks Q on every call and a 128-wide
  // tile is below its efficient size), and one online-softmax rescale of the accumulator per span.
  // A span's tiles are dense (row stride = the span's width): oneDNN's AMX kernels take dense matrices.
  const std::int64_t span_blocks = std::max<std::int64_t>(1, (kLowp ? kLowpSpanColumns : kSpanColumns) / kb);
  const std::int64_t span_max = span_blocks * kb;

  BlasSingleThreaded blas_guard;
  std::atomic<std::int64_t> next{0};
  const std::int64_t workers = std::min<std::int64_t>(num_threads(), std::max<std::int64_t>(items, 1));
  parallel_for(0, workers, 1, [&](std::int64_t, std::int64_t) {
    const DeferredSignals held;
    std::vector<A> s(static_cast<std::size_t>(qb * span_max));
    std::vector<T> p_low(kLowp ? static_cast<std::size_t>(qb * span_max) : 0);  // P rounded, for P V
    std::vector<std::uint8_t> mtile(static_cast<std::size_t>(qb * span_max));
    std::vector<A> acc(static_cast<std::size_t>(qb * Dv));
    std::vector<A> m(static_cast<std::size_t>(qb)), l(static_cast<std::size_t>(qb));
    std::vector<BlockRef> blocks;
    for (std::int64_t n = next.fetch_add(1); n < items; n = next.fetch_add(1)) {
      const std::int64_t it = order[static_cast<std::size_t>(n)];
      const std::int64_t qi = it % nqb, bh = it / nqb, b = bh / Hq, h = bh % Hq;
      const std::int64_t hkv = h / group;
      const std::int64_t q0 = qi * qb, nq = std::min(qb, L - q0);
      const T* Q = q + lay.q.at(b, h, q0);
      const T* K = k + lay.k.at(b, hkv, 0);
      const T* V = v + lay.v.at(b, hkv, 0);
      merged_blocks(bm.partial, bm.full, mask_row(b, h, qi), blocks);
      std::fill_n(m.begin(), nq, ninf);
      std::fill_n(l.begin(), nq, A(0));
      std::fill_n(acc.begin(), nq * Dv, A(0));
      for (std::size_t first = 0; first < blocks.size();) {
        std::size_t end = first + 1;
        while (end < blocks.size() && static_cast<std::int64_t>(end - first) < span_blocks &&
               blocks[end].index == blocks[end - 1].index + 1)
          ++end;
        const std::int64_t k0 = blocks[first].index * kb;
        const std::int64_t nk = std::min(S, (blocks[end - 1].index + 1) * kb) - k0;
        const std::int64_t ld = nk;
        // s [nq, nk] = scale * Q K^T
        tile_gemm(false, true, nq, nk, D, scale, Q, lay.q.row, K + k0 * lay.k.row, lay.k.row, A(0), s.data(), ld);
        if (!score_mod.is_identity()) score_mod.apply_tile(b, h, q0, nq, k0, nk, s.data(), ld, nullptr);
        for (std::size_t x = first; x < end; ++x) {
          if (blocks[x].full) continue;
          const std::int64_t c0 = blocks[x].index * kb - k0, nc = std::min(kb, nk - c0);
          bm.mask.fill(b, h, q0, nq, k0 + c0, nc, mtile.data() + c0, ld);
          for (std::int64_t i = 0; i < nq; ++i) row_apply_mask(s.data() + i * ld + c0, mtile.data() + i * ld + c0, nc);
        }
        // bf16: P goes straight from the exp to its rounded copy for the product (one pass, the same
        // bits as exp in place then cast_f32_to_lowp); l sums the unrounded P either way.
        constexpr bool kFusedBF16 = std::is_same_v<T, bf16>;
        for (std::int64_t i = 0; i < nq; ++i) {
          A* row = s.data() + i * ld;
          // max_nan: a NaN score makes the row NaN (row_kernels.h), never a finite value that hides it.
          const A m_new = max_nan(m[i], row_max(row, nk));
          if (m_new == ninf) {
            // Nothing allowed in this row so far: P is zero.
            if constexpr (kFusedBF16) std::fill_n(p_low.data() + i * ld, nk, T{});
            else std::fill_n(row, nk, A(0));
            continue;
          }
          const A alpha = m[i] == ninf ? A(0) : std::exp(m[i] - m_new);
          if constexpr (kFusedBF16) l[i] = l[i] * alpha + row_exp_sum_store_bf16(row, p_low.data() + i * ld, nk, m_new);
          else l[i] = l[i] * alpha + row_exp_store_sum(row, nk, m_new);
          m[i] = m_new;
          if (alpha != A(1)) row_scale(acc.data() + i * Dv, Dv, alpha);
        }
        // acc [nq, Dv] += P V; l above summed the f32 P, the product takes P rounded to T.
        if constexpr (kLowp) {
          if constexpr (!kFusedBF16) cast_f32_to_lowp(dtype_of<T>, p_low.data(), s.data(), nq * ld);
          tile_gemm(false, false, nq, Dv, nk, 1.0f, p_low.data(), ld, V + k0 * lay.v.row, lay.v.row, 1.0f, acc.data(), Dv);
        } else {
          tile_gemm(false, false, nq, Dv, nk, A(1), s.data(), ld, V + k0 * lay.v.row, lay.v.row, A(1), acc.data(), Dv);
        }
        first = end;
      }
      A* O = out + lay.out.at(b, h, q0);
      A* LSE = lse + bh * L + q0;
      for (std::int64_t i = 0; i < nq; ++i) {
        A* o = O + i * lay.out.row;
        if (l[i] > A(0) || std::isnan(l[i])) {  // l == 0: no key allowed; NaN: a NaN score (out, lse NaN)
          const A inv = A(1) / l[i];
          for (std::int64_t j = 0; j < Dv; ++j) o[j] = acc[static_cast<std::size_t>(i * Dv + j)] * inv;
          LSE[i] = m[i] + std::log(l[i]);
        } else {
          std::fill_n(o, Dv, A(0));
          LSE[i] = ninf;
        }
      }
    }
  });
}

template void flex_forward<float>(const AttentionShape&, const FlexLayout&, const BlockMask&, const ScoreMod&, const float*, const float*,
                                  const float*, float*, float*);
template void flex_forward<bf16>(const AttentionShape&, const FlexLayout&, const BlockMask&, const ScoreMod&, const bf16*, const bf16*,
                                 const bf16*, float*, float*);
template void flex_forward<double>(const AttentionShape&, const FlexLayout&, const BlockMask&, const ScoreMod&, const double*,
                                   const double*, const double*, double*, double*);

}  // namespace lmcore::attention::detail
