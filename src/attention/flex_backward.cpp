// The flex attention backward kernel (flash-attention-2 style, no atomics):
//   1. delta[i] = dO[i] . O[i] per query row (minus d_lse[i] when lse has a gradient too: the softmax
//      gradient dS = P (dP - delta) then gains the P d_lse that d lse / d S = P gives);
//   2. per (b, kv head, key block), over the query blocks of its transposed lists and every query
//      head of its GQA group: recompute P = exp(S - lse), then
//        dV += P^T dO,  dP = dO V^T,  dS = P (dP - delta) * score_mod',  dK += scale dS^T Q,
//        dQ += scale dS K  (into the running thread's own dQ buffer);
//   3. dQ = the thread buffers summed in thread order.
// Key blocks are split among threads by a fixed, cost-balanced cut of the item list, so the
// floating-point order of every sum depends only on the thread count: the same bits on every run.
// With bf16 inputs the five products run on the matrix units; P and dS are rounded to bf16 right
// before they enter a product (FlashAttention's choice), everything else stays f32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "lmcore/core/copy.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "src/attention/flex_kernels.h"
#include "src/attention/row_kernels.h"

namespace lmcore::attention::detail {

template <typename T>
void flex_backward(const AttentionShape& sh, const FlexLayout& lay, const BlockMask& bm, const ScoreMod& score_mod,
                   const T* q, const T* k, const T* v, const T* out, const T* d_out, const Acc<T>* lse, Acc<T>* dq,
                   Acc<T>* dk, Acc<T>* dv, std::vector<std::vector<double>>* score_mod_grads, const Acc<T>* d_lse) {
  using A = Acc<T>;  // double for f64 inputs, float otherwise
  constexpr bool kLowp = !std::is_same_v<T, A>;
  const std::int64_t B = sh.batch, Hq = sh.q_heads, Hkv = sh.kv_heads, L = sh.q_len, S = sh.kv_len;
  const std::int64_t D = sh.head_dim, Dv = sh.value_dim, group = Hq / Hkv;
  const std::int64_t qb = bm.q_block, kb = bm.kv_block, nkb = bm.num_kv_blocks;
  const A ninf = -std::numeric_limits<A>::infinity();
  const A scale = static_cast<A>(sh.scale);
  const bool has_mod = !score_mod.is_identity();

  // 1. delta = rowsum(dO * O)
  std::vector<A> delta(static_cast<std::size_t>(B * Hq * L));
  parallel_for(0, B * Hq * L, 1024, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t b = r / (Hq * L), h = r / L % Hq, i = r % L;
      const T* o = out + lay.out.at(b, h, i);
      const T* g = d_out + lay.d_out.at(b, h, i);
      A acc = 0;
      for (std::int64_t j = 0; j < Dv; ++j) acc += static_cast<A>(o[j]) * static_cast<A>(g[j]);
      delta[static_cast<std::size_t>(r)] = d_lse != nullptr ? acc - d_lse[r] : acc;
    }
  });

  // 2. Items (b, kv head, key block), cut into `parts` contiguous ranges of about equal cost.
  auto mask_row_t = [&](std::int64_t b, std::int64_t h, std::int64_t ki) {
    return ((bm.batch == 1 ? 0 : b) * bm.heads + (bm.heads == 1 ? 0 : h)) * nkb + ki;
  };
  const std::int64_t items = B * Hkv * nkb;
  std::vector<double> prefix(static_cast<std::size_t>(items) + 1, 0.0);
  for (std::int64_t it = 0; it < items; ++it) {
    const std::int64_t ki = it % nkb, bh = it / nkb, b = bh / Hkv, hkv = bh % Hkv;
    double c = 0;
    for (std::int64_t h = hkv * group; h < (hkv + 1) * group; ++h) {
      const std::int64_t r = mask_row_t(b, h, ki);
      c += 2.0 * static_cast<double>(bm.partial_t.blocks_in_row(r)) + static_cast<double>(bm.full_t.blocks_in_row(r));
    }
    prefix[static_cast<std::size_t>(it) + 1] = prefix[static_cast<std::size_t>(it)] + c + 0.01;
  }
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(num_threads(), items));
  std::vector<std::int64_t> cut(static_cast<std::size_t>(parts) + 1, items);
  cut[0] = 0;
  for (std::int64_t p = 1; p < parts; ++p) {
    const double target = prefix.back() * static_cast<double>(p) / static_cast<double>(parts);
    cut[static_cast<std::size_t>(p)] =
        std::lower_bound(prefix.begin(), prefix.end(), target) - prefix.begin();
    cut[static_cast<std::size_t>(p)] = std::clamp(cut[static_cast<std::size_t>(p)], cut[static_cast<std::size_t>(p) - 1], items);
  }

  // dQ: part 0 writes into dq itself; the others into their own zeroed (contiguous) buffers.
  const std::int64_t q_elems = B * Hq * L * D;
  const Strides4 dq_dense = dense4(Hq, L, D);
  parallel_for(0, B * Hq * L, 1024, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) std::fill_n(dq + lay.dq.at(r / (Hq * L), r / L % Hq, r % L), D, A(0));
  });
  std::vector<std::vector<A>> dq_parts(static_cast<std::size_t>(parts - 1));
  // Score-mod parameter gradients: one set per part, summed in part order like dQ.
  const std::int64_t n_params = score_mod_grads != nullptr ? score_mod.num_parameter_steps() : 0;
  std::vector<std::vector<std::vector<double>>> param_parts(static_cast<std::size_t>(n_params > 0 ? parts : 0));

  BlasSingleThreaded blas_guard;
  parallel_for(0, parts, 1, [&](std::int64_t plo, std::int64_t phi) {
    const DeferredSignals held;
    std::vector<A> s(static_cast<std::size_t>(qb * kb)), dp(static_cast<std::size_t>(qb * kb));
    std::vector<A> grad(has_mod ? static_cast<std::size_t>(qb * kb) : 0);
    std::vector<std::uint8_t> mtile(static_cast<std::size_t>(qb * kb));
    std::vector<T> low(kLowp ? static_cast<std::size_t>(qb * kb) : 0);  // P, then dS, rounded for the products
    std::vector<A> dk_acc(static_cast<std::size_t>(kb * D)), dv_acc(static_cast<std::size_t>(kb * Dv));
    std::vector<BlockRef> blocks;
    std::vector<A> suffix(static_cast<std::size_t>(n_params * qb * kb));
    std::vector<A*> suffix_tiles(static_cast<std::size_t>(n_params));
    for (std::int64_t p = 0; p < n_params; ++p) suffix_tiles[static_cast<std::size_t>(p)] = suffix.data() + p * qb * kb;
    std::vector<double*> param_out(static_cast<std::size_t>(n_params));
    for (std::int64_t part = plo; part < phi; ++part) {
      if (n_params > 0) {
        auto& mine = param_parts[static_cast<std::size_t>(part)];
        mine = *score_mod_grads;  // zeroed and sized by the caller
        for (std::int64_t p = 0; p < n_params; ++p) param_out[static_cast<std::size_t>(p)] = mine[static_cast<std::size_t>(p)].data();
      }
      A* dq_out = dq;
      Strides4 dql = lay.dq;
      if (part > 0) {
        auto& buf = dq_parts[static_cast<std::size_t>(part - 1)];
        buf.assign(static_cast<std::size_t>(q_elems), A(0));
        dq_out = buf.data();
        dql = dq_dense;
      }
      for (std::int64_t it = cut[static_cast<std::size_t>(part)]; it < cut[static_cast<std::size_t>(part) + 1]; ++it) {
        const std::int64_t ki = it % nkb, bh = it / nkb, b = bh / Hkv, hkv = bh % Hkv;
        const std::int64_t k0 = ki * kb, nk = std::min(kb, S - k0);
        const std::int64_t ld = nk;  // dense tiles (oneDNN's AMX kernels take dense matrices)
        const T* K = k + lay.k.at(b, hkv, k0);
        const T* V = v + lay.v.at(b, hkv, k0);
        const std::int64_t ldk = lay.k.row, ldv = lay.v.row, ldq = lay.q.row, ldo = lay.d_out.row;
        std::fill_n(dk_acc.begin(), nk * D, A(0));
        std::fill_n(dv_acc.begin(), nk * Dv, A(0));
        for (std::int64_t h = hkv * group; h < (hkv + 1) * group; ++h) {
          merged_blocks(bm.partial_t, bm.full_t, mask_row_t(b, h, ki), blocks);
          const std::int64_t bhq = b * Hq + h;
          for (const BlockRef& blk : blocks) {
            const std::int64_t q0 = blk.index * qb, nq = std::min(qb, L - q0);
            const T* Q = q + lay.q.at(b, h, q0);
            const T* dO = d_out + lay.d_out.at(b, h, q0);
            A* dQ = dq_out + dql.at(b, h, q0);
            const A* LSE = lse + bhq * L + q0;
            const A* DELTA = delta.data() + bhq * L + q0;
            // P [nq, nk] = exp(score_mod(scale Q K^T) masked - lse)
            tile_gemm(false, true, nq, nk, D, scale, Q, ldq, K, ldk, A(0), s.data(), ld);
            if (has_mod)
              score_mod.apply_tile(b, h, q0, nq, k0, nk, s.data(), ld, grad.data(), n_params > 0 ? suffix_tiles.data() : nullptr);
            if (!blk.full) {
              bm.mask.fill(b, h, q0, nq, k0, nk, mtile.data(), ld);
              for (std::int64_t i = 0; i < nq; ++i) row_apply_mask(s.data() + i * ld, mtile.data() + i * ld, nk);
            }
            for (std::int64_t i = 0; i < nq; ++i) {
              A* row = s.data() + i * ld;
              if (LSE[i] == ninf) std::fill_n(row, nk, A(0));  // an empty row has no gradient
              else row_exp(row, nk, LSE[i]);
            }
            // dV [nk, Dv] += P^T dO
            if constexpr (kLowp) {
              cast_f32_to_lowp(dtype_of<T>, low.data(), s.data(), nq * ld);
              tile_gemm(true, false, nk, Dv, nq, 1.0f, low.data(), ld, dO, ldo, 1.0f, dv_acc.data(), Dv);
            } else {
              tile_gemm(true, false, nk, Dv, nq, A(1), s.data(), ld, dO, ldo, A(1), dv_acc.data(), Dv);
            }
            // dP [nq, nk] = dO V^T
            tile_gemm(false, true, nq, nk, Dv, A(1), dO, ldo, V, ldv, A(0), dp.data(), ld);
            // dS = P (dP - delta) is d loss / d(modified score): it feeds the score_mod's parameters,
            // then times d score_mod / d score it becomes d loss / d(scale q.k). Masked entries stay 0.
            for (std::int64_t i = 0; i < nq; ++i) {
              A* d = dp.data() + i * ld;
              row_softmax_grad(d, s.data() + i * ld, d, nk, DELTA[i]);
            }
            if (n_params > 0)
              score_mod.accumulate_parameter_grads(b, h, q0, nq, k0, nk, dp.data(), suffix_tiles.data(), ld,
                                                   param_out.data());
            if (has_mod) {
              for (std::int64_t i = 0; i < nq; ++i) {
                A* d = dp.data() + i * ld;
                const A* p = s.data() + i * ld;
                const A* g = grad.data() + i * ld;
                for (std::int64_t j = 0; j < nk; ++j) d[j] = p[j] == A(0) ? A(0) : d[j] * g[j];
              }
            }
            // dK [nk, D] += scale dS^T Q;  dQ [nq, D] += scale dS K
            if constexpr (kLowp) {
              cast_f32_to_lowp(dtype_of<T>, low.data(), dp.data(), nq * ld);
              tile_gemm(true, false, nk, D, nq, scale, low.data(), ld, Q, ldq, 1.0f, dk_acc.data(), D);
              tile_gemm(false, false, nq, D, nk, scale, low.data(), ld, K, ldk, 1.0f, dQ, dql.row);
            } else {
              tile_gemm(true, false, nk, D, nq, scale, dp.data(), ld, Q, ldq, A(1), dk_acc.data(), D);
              tile_gemm(false, false, nq, D, nk, scale, dp.data(), ld, K, ldk, A(1), dQ, dql.row);
            }
          }
        }
        for (std::int64_t r = 0; r < nk; ++r) {
          std::copy_n(dk_acc.begin() + r * D, D, dk + lay.dk.at(b, hkv, k0 + r));
          std::copy_n(dv_acc.begin() + r * Dv, Dv, dv + lay.dv.at(b, hkv, k0 + r));
        }
      }
    }
  });

  // 3. dQ and the score_mod parameter gradients = part 0 + part 1 + ... in part order.
  for (const auto& part : param_parts)
    for (std::size_t p = 0; p < part.size(); ++p)
      for (std::size_t i = 0; i < part[p].size(); ++i) (*score_mod_grads)[p][i] += part[p][i];
  if (!dq_parts.empty()) {
    parallel_for(0, B * Hq * L, 64, [&](std::int64_t lo, std::int64_t hi) {
      for (const auto& buf : dq_parts)
        for (std::int64_t r = lo; r < hi; ++r) {
          A* row = dq + lay.dq.at(r / (Hq * L), r / L % Hq, r % L);
          const A* part = buf.data() + r * D;
          for (std::int64_t j = 0; j < D; ++j) row[j] += part[j];
        }
    });
  }
}

template void flex_backward<float>(const AttentionShape&, const FlexLayout&, const BlockMask&, const ScoreMod&, const float*,
                                   const float*, const float*, const float*, const float*, const float*, float*, float*,
                                   float*, std::vector<std::vector<double>>*, const float*);
template void flex_backward<bf16>(const AttentionShape&, const FlexLayout&, const BlockMask&, const ScoreMod&, const bf16*, const bf16*,
                                  const bf16*, const bf16*, const bf16*, const float*, float*, float*, float*,
                                  std::vector<std::vector<double>>*, const float*);
template void flex_backward<double>(const AttentionShape&, const FlexLayout&, const BlockMask&, const ScoreMod&, const double*,
                                    const double*, const double*, const double*, const double*, const double*,
                                    double*, double*, double*, std::vector<std::vector<double>>*, const double*);

}  // namespace lmcore::attention::detail
