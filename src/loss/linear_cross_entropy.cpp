// The fused linear cross-entropy: tiles of logits from sgemm/dgemm, folded into a running logsumexp
// per token, and the backward from recomputed tiles. See include/lmcore/loss/linear_cross_entropy.h.
// bf16 hidden and weight with f32 accumulation run the three products on the matrix units instead
// (gemm_lowp, oneDNN: operands In = bf16 as given, f32 logits and sums), where the CPU has them.
//
// Buffers (T rows per token tile, C vocabulary columns per chunk, P weight rows per panel; In is Acc,
// or bf16 on the matrix units):
//   tile   [T, C]  logits, then d_logits in place
//   tlow   [T, C]  d_logits rounded to bf16 for the gradient products (matrix units only)
//   hrows  [T, H]  the tile's hidden rows in In (only when hidden is not In or not row-contiguous)
//   wpanel [P, H]  weight rows in In (only when weight is not In or not row-contiguous)
//   dh     [T, H]  d_hidden of the tile in Acc (only when hidden is not Acc)
//   dw     [V, H]  d_weight in Acc (only when the caller's d_weight is not Acc or not row-contiguous)
//   dht    [threads, H, T]  d_hidden^T per vocabulary slice (transposed tiles only)
//   block_m [threads, blocks, T]  the running max per block of vocabulary rows (transposed tiles only)
// All but dw are TileBuffers: allocated per call, or carved from LossOptions::workspace.
//
// On the matrix units forward and backward together (dense W, no softcap) hold the logits transposed
// instead: tile = zT [C, T], then d_logits^T in bf16 written over it in place (no tlow: 4 bytes a
// logit), so that W and d_logits enter the logits and d_weight products as the "A" operand in their
// stored layout, which oneDNN reads without re-blocking it (see FusedLce::transposed_tile).
#include "lmcore/loss/linear_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "lmcore/core/copy.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/internal/row_kernels.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "src/loss/col_kernels.h"
#include "src/loss/loss_common.h"
#include "src/loss/tiling.h"

namespace lmcore {

namespace {

using loss_detail::Buffer;
using loss_detail::LossSetup;
using loss_detail::RowStats;

template <typename Acc>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const Acc* a, std::int64_t lda,
          const Acc* b, std::int64_t ldb, Acc beta, Acc* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS leaves C untouched for k = 0 on some builds; the product is zero.
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == Acc(0) ? Acc(0) : c[i * ldc + j] * beta;
    return;
  }
  if constexpr (std::is_same_v<Acc, float>) gemm_f32(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else gemm_f64(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

// bf16 operands on the matrix units, f32 C (k == 0 included: gemm_lowp scales C by beta).
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a, std::int64_t lda,
          const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  gemm_lowp(DType::bf16, DType::f32, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// Whether bf16 hidden/weight with f32 accumulation run their products on the matrix units (In = bf16).
bool lce_on_matrix_units(const Tensor& hidden, const Tensor& weight, DType accumulate) {
  return accumulate == DType::f32 && hidden.dtype() == DType::bf16 && weight.dtype() == DType::bf16 &&
         lowp_gemm_path(DType::bf16) == LowpGemmPath::onednn;
}

// Where the tile buffers of a call come from: fresh (tracked) allocations, the caller's workspace
// (LossOptions::workspace, carved in order in 64-byte multiples), or nowhere: counting the bytes a
// workspace must hold (linear_cross_entropy_workspace_bytes). The same takes in the same order.
class Scratch {
 public:
  enum class Mode { allocate, carve, count };
  Scratch(Mode mode, void* base, std::size_t size) : mode_(mode), base_(static_cast<std::byte*>(base)), size_(size) {}
  template <typename T>
  Buffer<T> take(std::int64_t n) {
    const std::size_t bytes = (static_cast<std::size_t>(std::max<std::int64_t>(n, 0)) * sizeof(T) + 63) / 64 * 64;
    if (mode_ == Mode::allocate) return Buffer<T>(n);
    const std::size_t at = used_;
    used_ += bytes;
    if (mode_ == Mode::count) return Buffer<T>();
    LMCORE_ASSERT(used_ <= size_);  // run_fused checked the workspace's size against the count
    return Buffer<T>::view(reinterpret_cast<T*>(base_ + at), n);
  }
  std::size_t used() const { return used_; }

 private:
  Mode mode_;
  std::byte* base_;
  std::size_t size_, used_ = 0;
};

// BLAS needs unit column stride and a row stride >= H (an expanded row with stride 0 is copied).
bool rows_direct(const Tensor& t, DType in) {
  return t.dtype() == in && (t.stride(1) == 1 || t.size(1) <= 1) && (t.size(0) <= 1 || t.stride(0) >= t.size(1));
}

// How a call cuts its work: the tiling, and whether its tiles are transposed (matrix units; see the
// top of the file and FusedLce::transposed_tile).
struct Plan {
  loss_detail::Tiling tiling;
  bool transposed = false;
};

// Transposed tiles: one vocabulary slice per thread, and the row blocks of kColBlock rows a slice of
// V rows can have (ceil(V / threads) rows at most).
int transposed_slices() { return std::max(1, num_threads()); }
std::int64_t transposed_blocks(std::int64_t v, int slices) {
  return (v / slices + 1 + loss_detail::kColBlock - 1) / loss_detail::kColBlock + 1;
}

// The tile buffers of one call (see the table at the top), taken from a Scratch in a fixed order.
// hidden_direct / weight_direct: the operand is read as it is (rows_direct), no conversion buffer.
template <typename Acc, typename In>
struct TileBuffers {
  Buffer<In> hrows;                // [T, H] (unless hidden_direct)
  std::vector<Buffer<In>> panels;  // [P, H] per slice (unless weight_direct)
  Buffer<Acc> tile;                // [T, C]
  Buffer<In> tile_low;             // [T, C] (matrix units)
  Buffer<Acc> dh_parts;            // (slices - 1) x [T, H] (backward)
  Buffer<Acc> dh_tile;             // [min(T, N), H] (backward, hidden not Acc)
  Buffer<Acc> dht;                 // threads x [H, min(T, N)] (transposed)
  Buffer<float> block_m;           // threads x [blocks, min(T, N)] (transposed)
  TileBuffers(Scratch& sc, const Plan& plan, std::int64_t n, std::int64_t h, std::int64_t v, int slices,
              bool hidden_direct, bool weight_direct, bool backward, bool hidden_is_acc) {
    const loss_detail::Tiling& t = plan.tiling;
    const std::int64_t hh = std::max<std::int64_t>(h, 1);
    if (!hidden_direct) hrows = sc.take<In>(t.rows * hh);
    for (int p = 0; p < slices; ++p) panels.push_back(weight_direct ? Buffer<In>() : sc.take<In>(t.panel * hh));
    tile = sc.take<Acc>(t.rows * t.cols);
    if constexpr (!std::is_same_v<Acc, In>)
      if (!plan.transposed) tile_low = sc.take<In>(t.rows * t.cols);
    if (backward && slices > 1) dh_parts = sc.take<Acc>((slices - 1) * t.rows * h);
    if (backward && !hidden_is_acc) dh_tile = sc.take<Acc>(std::min(t.rows, n) * h);
    if (plan.transposed) {
      const int P = transposed_slices();
      const std::int64_t rows = std::min(t.rows, n);
      dht = sc.take<Acc>(P * h * rows);
      block_m = sc.take<float>(P * transposed_blocks(std::min(t.cols, v), P) * rows);
    }
  }
};

// A 2-D [rows, H] operand read as Acc rows: directly when it already is Acc with unit column
// stride, else through a conversion buffer (`buf`, rows x H, from TileBuffers).
template <typename Acc>
class RowSource {
 public:
  RowSource(const Tensor& t, Buffer<Acc> buf) : t_(t), direct_(rows_direct(t, dtype_of<Acc>)), buf_(std::move(buf)) {}
  // Whether rows() hands out the tensor's own memory (no conversion).
  bool direct() const { return direct_; }
  // Rows [r0, r0 + n) as a row-major block; *ld receives the row stride.
  const Acc* rows(std::int64_t r0, std::int64_t n, std::int64_t* ld) {
    const std::int64_t h = t_.size(1);
    if (direct_) {
      *ld = t_.size(0) <= 1 ? std::max<std::int64_t>(h, 1) : std::max<std::int64_t>(t_.stride(0), 1);
      return t_.data<Acc>() + r0 * t_.stride(0);
    }
    Tensor dst = buf_.tensor.narrow(0, 0, n * h).view({n, h});
    copy_cast(t_.narrow(0, r0, n), dst);
    *ld = std::max<std::int64_t>(h, 1);
    return buf_.data();
  }

 private:
  const Tensor& t_;
  bool direct_;
  Buffer<Acc> buf_;
};

template <typename Acc>
struct GradSinks {
  Acc* dh = nullptr;  // [T, H] of the current tile, ld H
  Acc* dw = nullptr;  // [V, H], ld dw_ld
  std::int64_t dw_ld = 0;
  Acc* db = nullptr;  // [V]
};


// The tiled kernel. Each step that touches W is cut into `pieces` contiguous vocabulary slices, one
// per thread, and each slice makes its own single-threaded GEMM calls (in panels of P rows when W
// must be converted): logits[:, slice] = h @ W[slice]^T; d_hidden_p += d_logits[:, slice] @ W[slice]
// (a partial sum per slice, added up in slice order at the end of the token tile, so results depend
// on the thread count only through that order); d_weight[slice] += d_logits[:, slice]^T @ h.
//
// In is the operand type of the products: Acc itself (hidden and weight converted to Acc when they
// are not), or bf16 with Acc = f32 on the matrix units: hidden and weight are used as they are, the
// logits come out in f32, and the f32 d_logits are rounded to bf16 (tile_low_) right before the two
// gradient products, whose sums stay f32 (d_hidden and d_weight in Acc).
template <typename Acc, typename In = Acc>
class FusedLce {
  static constexpr bool kLowp = !std::is_same_v<Acc, In>;
  // Weight-gradient rows per BLAS call. OpenBLAS packs the d_logits operand of a call whole (up to
  // its GEMM_R columns) into its per-thread buffer, and the pages it touches there stay resident: one
  // call over a slice of V / threads rows grew the process by ~50 MiB with the default budget (N = 2048,
  // V = 32000, 2 threads: more than a third of the tile itself). 2048 rows cap that at a few MiB at no
  // measured cost in speed (the other operand, the tile's hidden rows, is small and cache-resident).
  static constexpr std::int64_t kDwRows = 2048;

 public:
  // On the matrix units every product is one call from this thread (gemm_lowp spreads it over the
  // pool), so there is a single slice and a single weight source.
  static int slices() { return kLowp ? 1 : std::max(1, num_threads()); }

  // transposed: whole-vocabulary forward + backward tiles run through transposed_tile (Plan).
  FusedLce(const Tensor& hidden, const Tensor& weight, const LossSetup<Acc>& S, const Plan& plan,
           TileBuffers<Acc, In>& bufs)
      : S_(S),
        tiling_(plan.tiling),
        transposed_(plan.transposed),
        n_(hidden.size(0)),
        h_(hidden.size(1)),
        v_(weight.size(0)),
        pieces_(slices()),
        hsrc_(hidden, std::move(bufs.hrows)),
        tile_(std::move(bufs.tile)),
        tile_low_(std::move(bufs.tile_low)),
        dh_parts_(std::move(bufs.dh_parts)),
        dht_(std::move(bufs.dht)),
        block_m_(std::move(bufs.block_m)) {
    wsrc_.reserve(static_cast<std::size_t>(pieces_));
    for (int p = 0; p < pieces_; ++p) wsrc_.emplace_back(weight, std::move(bufs.panels[static_cast<std::size_t>(p)]));
  }

  // Logits of the tile's t token rows and vocabulary columns [j0, j0 + c) into tile_ (ld c), bias
  // and softcap applied.
  void compute_logits(const In* hb, std::int64_t ldh, std::int64_t t, std::int64_t j0, std::int64_t c) {
    Acc* tile = tile_.data();
    if constexpr (kLowp) {
      // One product per panel (one for the whole chunk unless W needs converting) from this thread:
      // gemm_lowp cuts it over the pool by token rows, so every block of C is dense (no staging).
      for (std::int64_t p0 = j0; p0 < j0 + c; p0 += tiling_.panel) {
        const std::int64_t pn = std::min(tiling_.panel, j0 + c - p0);
        std::int64_t ldw = 0;
        const In* w = wsrc_[0].rows(p0, pn, &ldw);
        gemm(false, true, t, pn, h_, hb, ldh, w, ldw, Acc(0), tile + (p0 - j0), c);
      }
    } else {
      for_each_panel(j0, c, [&](int p, std::int64_t p0, std::int64_t pn) {
        std::int64_t ldw = 0;
        const In* w = wsrc_[static_cast<std::size_t>(p)].rows(p0, pn, &ldw);
        gemm(false, true, t, pn, h_, hb, ldh, w, ldw, Acc(0), tile + (p0 - j0), c);
      });
    }
    if (S_.bias || S_.cap > 0)
      parallel_for(0, t, 4, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t r = lo; r < hi; ++r) loss_detail::transform_logits(S_, tile + r * c, j0, c);
      });
  }

  // Adds the contributions of the d_logits in tile_ (t token rows, columns [j0, j0 + c)): d_hidden
  // into per-slice partial sums (see finish_dh), d_weight and d_bias into the sinks.
  void accumulate_grads(const In* hb, std::int64_t ldh, std::int64_t t, std::int64_t j0, std::int64_t c,
                        const GradSinks<Acc>& sinks) {
    const Acc* dz_acc = tile_.data();
    const std::int64_t ldd = std::max<std::int64_t>(h_, 1);
    if constexpr (kLowp) {
      // d_logits rounded to bf16 once, then whole-chunk products from this thread (gemm_lowp cuts
      // them over the pool: d_hidden by token rows, d_weight by vocabulary rows), sums in f32.
      parallel_for(0, t, 16, [&](std::int64_t lo, std::int64_t hi) {
        cast_f32_to_lowp(dtype_of<In>, tile_low_.data() + lo * c, dz_acc + lo * c, (hi - lo) * c);
      });
      const In* dz = tile_low_.data();
      for (std::int64_t p0 = j0; p0 < j0 + c; p0 += tiling_.panel) {
        const std::int64_t pn = std::min(tiling_.panel, j0 + c - p0);
        std::int64_t ldw = 0;
        const In* w = wsrc_[0].rows(p0, pn, &ldw);
        // d_hidden[t, H] += d_logits[t, pn] @ W[pn, H];  d_weight[pn, H] += d_logits[t, pn]^T @ hidden[t, H]
        gemm(false, false, t, h_, pn, dz + (p0 - j0), c, w, ldw, Acc(1), sinks.dh, ldd);
        if (sinks.dw)
          gemm(true, false, pn, h_, t, dz + (p0 - j0), c, hb, ldh, Acc(1), sinks.dw + p0 * sinks.dw_ld, sinks.dw_ld);
      }
      if (sinks.db)
        parallel_for(0, c, 256, [&](std::int64_t lo, std::int64_t hi) {
          for (std::int64_t r = 0; r < t; ++r)
            for (std::int64_t j = lo; j < hi; ++j) sinks.db[j0 + j] += dz_acc[r * c + j];
        });
    } else {
      const Acc* dz = dz_acc;
      for_each_panel(j0, c, [&](int p, std::int64_t p0, std::int64_t pn) {
        std::int64_t ldw = 0;
        const In* w = wsrc_[static_cast<std::size_t>(p)].rows(p0, pn, &ldw);
        // d_hidden_p[t, H] += d_logits[t, pn] @ W[pn, H]
        gemm(false, false, t, h_, pn, dz + (p0 - j0), c, w, ldw, Acc(1), dh_of(p, sinks), ldd);
        // d_weight[pn, H] += d_logits[t, pn]^T @ hidden[t, H], in pieces of kDwRows rows (see below)
        if (sinks.dw)
          for (std::int64_t q0 = p0; q0 < p0 + pn; q0 += kDwRows) {
            const std::int64_t qn = std::min(kDwRows, p0 + pn - q0);
            gemm(true, false, qn, h_, t, dz + (q0 - j0), c, hb, ldh, Acc(1), sinks.dw + q0 * sinks.dw_ld, sinks.dw_ld);
          }
        if (sinks.db)
          for (std::int64_t r = 0; r < t; ++r) {
            const Acc* row = dz_acc + r * c + (p0 - j0);
            for (std::int64_t j = 0; j < pn; ++j) sinks.db[p0 + j] += row[j];
          }
      });
    }
  }

  // Zeroes the other slices' partial d_hidden sums for a tile of t rows (slice 0 adds straight into
  // sinks.dh, which DhStore::begin zeroes).
  void begin_dh(std::int64_t t) {
    if (pieces_ == 1) return;
    for (int p = 1; p < pieces_; ++p) std::fill(dh_part(p), dh_part(p) + t * h_, Acc(0));
  }

  // dh += the other slices' partial sums, in slice order.
  void finish_dh(std::int64_t t, Acc* dh) {
    if (pieces_ == 1) return;
    parallel_for(0, t, 16, [&](std::int64_t lo, std::int64_t hi) {
      for (int p = 1; p < pieces_; ++p) {
        const Acc* part = dh_part(p);
        for (std::int64_t k = lo * h_; k < hi * h_; ++k) dh[k] += part[k];
      }
    });
  }

  // The whole computation. Forward when ce/zl are given (lse is written), backward when g is given
  // (lse is read, or written first by the forward). d_hidden rows go to `store_dh` per tile.
  template <typename StoreDh>
  void run(Acc* lse, Acc* ce, Acc* zl, const Acc* g, GradSinks<Acc> sinks, StoreDh&& store_dh) {
    const BlasSingleThreaded blas_guard;
    const bool forward = ce != nullptr, backward = g != nullptr;
    const std::int64_t T = tiling_.rows, C = tiling_.cols;
    // One pass from one tile when a tile spans the vocabulary: d_logits need the final lse only.
    const bool single = forward && backward && C >= v_;
    // ... and then, for f32 without softcap, each row's forward and d_logits share one exp per logit.
    const bool one_exp = single && std::is_same_v<Acc, float> && S_.cap == 0;
    if constexpr (kLowp) {
      if (transposed_) {
        LMCORE_ASSERT(forward && backward && S_.cap == 0);
        for (std::int64_t i0 = 0; i0 < n_; i0 += T) {
          const std::int64_t t = std::min(T, n_ - i0);
          std::int64_t ldh = 0;
          const In* hb = hsrc_.rows(i0, t, &ldh);
          sinks.dh = store_dh.begin(i0, t);
          transposed_tile(hb, ldh, i0, t, lse, ce, zl, g, sinks);
          store_dh.end(i0, t);
        }
        return;
      }
    }
    std::vector<RowStats<Acc>> stats(static_cast<std::size_t>(T));  // T * 4 values: too small to track
    for (std::int64_t i0 = 0; i0 < n_; i0 += T) {
      const std::int64_t t = std::min(T, n_ - i0);
      std::int64_t ldh = 0;
      const In* hb = hsrc_.rows(i0, t, &ldh);
      if (backward) {
        sinks.dh = store_dh.begin(i0, t);
        begin_dh(t);
      }
      if (forward) {
        for (std::int64_t r = 0; r < t; ++r) stats[r] = RowStats<Acc>();
        for (std::int64_t j0 = 0; j0 < v_; j0 += C) {
          const std::int64_t c = std::min(C, v_ - j0);
          compute_logits(hb, ldh, t, j0, c);
          Acc* tile = tile_.data();
          parallel_for(0, t, 4, [&](std::int64_t lo, std::int64_t hi) {
            for (std::int64_t r = lo; r < hi; ++r) {
              const std::int64_t i = i0 + r;
              if constexpr (std::is_same_v<Acc, float>) {
                if (one_exp) {
                  loss_detail::loss_and_grad_row_f32(S_, i, tile + r * c, g[i], lse[i], ce[i], zl[i]);
                  continue;
                }
              }
              loss_detail::fold_chunk(S_, i, stats[r], tile + r * c, j0, c);
              if (j0 + c < v_) continue;
              lse[i] = stats[r].lse();
              loss_detail::row_loss(S_, i, lse[i], stats[r].zt, stats[r].wz, ce[i], zl[i]);
              if (single) {
                const auto rg = loss_detail::row_grad(S_, i, lse[i], g[i]);
                loss_detail::grad_chunk(S_, i, rg, lse[i], tile + r * c, j0, c);
              }
            }
          });
          if (single) accumulate_grads(hb, ldh, t, j0, c, sinks);
        }
      }
      if (backward && !single) {
        for (std::int64_t j0 = 0; j0 < v_; j0 += C) {
          const std::int64_t c = std::min(C, v_ - j0);
          compute_logits(hb, ldh, t, j0, c);
          Acc* tile = tile_.data();
          parallel_for(0, t, 4, [&](std::int64_t lo, std::int64_t hi) {
            for (std::int64_t r = lo; r < hi; ++r) {
              const std::int64_t i = i0 + r;
              const auto rg = loss_detail::row_grad(S_, i, lse[i], g[i]);
              loss_detail::grad_chunk(S_, i, rg, lse[i], tile + r * c, j0, c);
            }
          });
          accumulate_grads(hb, ldh, t, j0, c, sinks);
        }
      }
      if (backward) {
        finish_dh(t, sinks.dh);
        store_dh.end(i0, t);
      }
    }
  }

 private:
  // One tile of t tokens (rows i0...) on the matrix units with its logits transposed: zT [C, t] in
  // tile_ for each chunk of C vocabulary rows (one chunk when C >= V: a single pass; else the
  // statistics over all chunks first, then the chunks again for the gradients), then d_logits^T in
  // bf16 over it: each thread's slice [a, b) of the chunk's rows is rewritten in place as a dense bf16
  // [b - a, t] block at the start of its own f32 rows (a row of bf16 is half an f32 row, so row r
  // lands on rows <= r/2, already read), which makes a tile 4 bytes a logit. oneDNN re-blocks, on
  // every call, an operand that is transposed or that is the "B" of a product; untransposed, a tile
  // re-blocked W twice (logits and d_hidden) and d_logits once (d_weight). Here the logits and
  // d_weight products take W and d_logits as "A" in their stored layout; only the d_hidden product
  // still re-blocks (its W slice and d_logits slice, per thread):
  //   1. zT = W[chunk] @ h^T            (A = W as stored; gemm_lowp cuts the rows over the threads)
  //   2. per token: running max, exp in place, sum (column loops, col_kernels.h); lse, loss, coefficients
  //   3. dzT = d_logits^T in bf16       (and d_bias)
  //   4. d_weight[chunk] += dzT @ h     (A = dzT as stored)
  //   5. d_hidden^T = sum over vocabulary slices of W[slice]^T @ dzT[slice], one slice per thread,
  //      added into d_hidden in slice order (so results depend on the thread count through that order).
  void transposed_tile(const In* hb, std::int64_t ldh, std::int64_t i0, std::int64_t t, Acc* lse, Acc* ce, Acc* zl,
                       const Acc* g, const GradSinks<Acc>& sinks) {
    std::int64_t ldw = 0;
    const In* w = wsrc_[0].rows(0, v_, &ldw);
    LMCORE_ASSERT(ldw == h_);
    const int P = transposed_slices();
    const std::int64_t C = std::min(tiling_.cols, v_);
    const bool one_chunk = C >= v_;
    const std::size_t tn = static_cast<std::size_t>(t);
    Acc* zt = tile_.data();
    const std::int64_t blocks = transposed_blocks(C, P);
    const auto block_m_of = [&](std::int64_t p) { return block_m_.data() + p * blocks * t; };
    // Slice p of a chunk of c rows: its rows [c p / P, c (p + 1) / P) of the tile.
    const auto piece = [&](std::int64_t c, std::int64_t p) { return c * p / P; };
    // Slice p's d_logits^T, written over its logits.
    const auto dz_of = [&](std::int64_t c, std::int64_t p) { return reinterpret_cast<In*>(zt + piece(c, p) * t); };
    // 1. The logits of vocabulary rows [j0, j0 + c): zT [c, t] = W[j0 : j0 + c] @ h^T, plus the bias.
    const auto logits = [&](std::int64_t j0, std::int64_t c) {
      gemm(false, true, c, t, h_, w + j0 * ldw, ldw, hb, ldh, Acc(0), zt, t);
      if (S_.bias)
        parallel_for(0, c, 64, [&](std::int64_t lo, std::int64_t hi) {
          for (std::int64_t r = lo; r < hi; ++r)
            for (std::int64_t j = 0; j < t; ++j) zt[r * t + j] += S_.bias[j0 + r];
        });
    };
    // 2. Per slice one pass: running max, exp in place, sums (and the weighted sums of label
    //    smoothing) into the slice's m, s (and wz), which carry over from chunk to chunk.
    const auto stats = [&](std::int64_t j0, std::int64_t c, float* m_p, float* s_p, float* wz_p) {
      parallel_for(0, P, 1, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t p = lo; p < hi; ++p) {
          const std::int64_t a = piece(c, p), b = piece(c, p + 1);
          LMCORE_ASSERT((b - a + loss_detail::kColBlock - 1) / loss_detail::kColBlock <= blocks);
          loss_detail::col_exp_store_sum_online_f32(
              zt + a * t, b - a, t, m_p + p * tn, s_p + p * tn, S_.class_weight ? S_.class_weight + j0 + a : nullptr,
              wz_p ? wz_p + p * tn : nullptr, block_m_of(p));
        }
      });
    };
    const float ninf = -std::numeric_limits<float>::infinity();
    std::vector<float> zt_target(tn, 0.0f), m_part(P * tn, ninf), s_part(P * tn, 0.0f),
        wz_part(S_.eps > 0 ? P * tn : 0, 0.0f);
    for (std::int64_t j0 = 0; j0 < v_; j0 += C) {
      const std::int64_t c = std::min(C, v_ - j0);
      logits(j0, c);
      for (std::int64_t j = 0; j < t; ++j) {
        const std::int64_t tgt = S_.target[i0 + j];
        if (tgt >= j0 && tgt < j0 + c) zt_target[j] = zt[(tgt - j0) * t + j];
      }
      stats(j0, c, m_part.data(), s_part.data(), S_.eps > 0 ? wz_part.data() : nullptr);
    }
    // The slices' maxes and sums combined in slice order; each token's lse, loss and coefficients.
    std::vector<float> m(tn), s(tn, 0.0f), wz(tn, 0.0f), factor(tn);
    for (std::int64_t j = 0; j < t; ++j) {
      float mj = m_part[static_cast<std::size_t>(j)];
      for (int p = 1; p < P; ++p) mj = internal::max_nan(mj, m_part[p * tn + j]);
      m[j] = mj;
      for (int p = 0; p < P && S_.eps > 0; ++p) wz[j] += wz_part[p * tn + j];
    }
    for (int p = 0; p < P; ++p) {
      loss_detail::col_rebase_f32(t, m_part.data() + p * tn, m.data(), factor.data());
      for (std::int64_t j = 0; j < t; ++j) s[j] += s_part[p * tn + j] * factor[j];
    }
    std::vector<float> scale(tn, 0.0f), bw(tn, 0.0f), bt(tn, 0.0f), keep(tn, 0.0f);
    std::vector<std::int32_t> target(tn, -1);
    for (std::int64_t j = 0; j < t; ++j) {
      const std::int64_t i = i0 + j;
      const float sj = s[j];
      lse[i] = m[j] + std::log(sj);
      loss_detail::row_loss(S_, i, lse[i], zt_target[j], wz[j], ce[i], zl[i]);
      if (!S_.counted(i)) continue;
      const auto r = loss_detail::row_grad(S_, i, lse[i], g[i]);
      scale[j] = r.a / sj;
      bw[j] = r.bw;
      bt[j] = r.bt;
      keep[j] = 1.0f;
      target[j] = static_cast<std::int32_t>(S_.target[i]);
    }
    // The gradient pass over the chunks (the one chunk's exps are still in the tile; more chunks are
    // computed again, their exps against each block's own running max, as the first time).
    std::vector<float> m_again(one_chunk ? 0 : P * tn), s_again(one_chunk ? 0 : P * tn);
    for (std::int64_t j0 = 0; j0 < v_; j0 += C) {
      const std::int64_t c = std::min(C, v_ - j0);
      if (!one_chunk) {
        logits(j0, c);
        std::fill(m_again.begin(), m_again.end(), ninf);
        std::fill(s_again.begin(), s_again.end(), 0.0f);
        stats(j0, c, m_again.data(), s_again.data(), nullptr);
      }
      // 3. d_logits^T in bf16 over each slice's exps (and d_bias).
      parallel_for(0, P, 1, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t p = lo; p < hi; ++p) {
          const std::int64_t a = piece(c, p), b = piece(c, p + 1);
          loss_detail::ColGrad cg;
          cg.scale = scale.data();
          cg.bw = S_.eps > 0 ? bw.data() : nullptr;
          cg.w = S_.eps > 0 && S_.class_weight ? S_.class_weight + j0 + a : nullptr;
          cg.bt = bt.data();
          cg.target = target.data();
          cg.keep = keep.data();
          cg.block_m = block_m_of(p);
          cg.m = m.data();
          loss_detail::col_grad_to_bf16(zt + a * t, b - a, t, j0 + a, cg, dz_of(c, p),
                                        sinks.db ? sinks.db + j0 + a : nullptr);
        }
      });
      // 4. d_weight rows += dzT @ h and 5. d_hidden^T (per slice, summed over the chunks) +=
      //    W[rows]^T @ dzT, each thread on its slice (single-threaded products inside the parallel_for).
      parallel_for(0, P, 1, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t p = lo; p < hi; ++p) {
          const std::int64_t a = j0 + piece(c, p), b = j0 + piece(c, p + 1);
          if (sinks.dw)
            gemm(false, false, b - a, h_, t, dz_of(c, p), t, hb, ldh, Acc(1), sinks.dw + a * sinks.dw_ld,
                 sinks.dw_ld);
          gemm(true, false, h_, t, b - a, w + a * ldw, ldw, dz_of(c, p), t, j0 == 0 ? Acc(0) : Acc(1),
               dht_.data() + p * h_ * t, t);
        }
      });
    }
    // d_hidden [t, H] += the slices' d_hidden^T [H, t], in blocks of 16 tokens x 64 features so that
    // both sides' cache lines stay in L1 while the block is transposed.
    Acc* dh = sinks.dh;
    parallel_for(0, (t + 15) / 16, 1, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t k = lo * 16; k < std::min(t, hi * 16); k += 16)
        for (std::int64_t f0 = 0; f0 < h_; f0 += 64)
          for (std::int64_t j = k; j < std::min(t, k + 16); ++j)
            for (std::int64_t f = f0; f < std::min(h_, f0 + 64); ++f) {
              Acc x = dh[j * h_ + f];
              for (int p = 0; p < P; ++p) x += dht_[p * h_ * t + f * t + j];
              dh[j * h_ + f] = x;
            }
    });
  }


  // Calls fn(slice, p0, pn) for the panels [p0, p0 + pn) of each thread's slice of [j0, j0 + c),
  // slices in parallel, the panels of one slice in order.
  template <typename Fn>
  void for_each_panel(std::int64_t j0, std::int64_t c, Fn&& fn) {
    parallel_for(0, pieces_, 1, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t p = lo; p < hi; ++p) {
        const std::int64_t a = j0 + c * p / pieces_, b = j0 + c * (p + 1) / pieces_;
        for (std::int64_t p0 = a; p0 < b; p0 += tiling_.panel)
          fn(static_cast<int>(p), p0, std::min(tiling_.panel, b - p0));
      }
    });
  }

  Acc* dh_part(int p) const { return dh_parts_.data() + (p - 1) * tiling_.rows * h_; }
  Acc* dh_of(int p, const GradSinks<Acc>& sinks) const { return p == 0 ? sinks.dh : dh_part(p); }

  const LossSetup<Acc>& S_;
  loss_detail::Tiling tiling_;
  bool transposed_;
  std::int64_t n_, h_, v_;
  int pieces_;
  RowSource<In> hsrc_;
  std::vector<RowSource<In>> wsrc_;  // one per slice: each converts its own panels
  Buffer<Acc> tile_;
  Buffer<In> tile_low_;  // d_logits rounded to In for the gradient products (kLowp only)
  Buffer<Acc> dh_parts_;  // (pieces - 1) x [T, H] (backward only)
  Buffer<Acc> dht_;       // threads x [H, T]: d_hidden^T per vocabulary slice (transposed_tile only)
  Buffer<float> block_m_;  // threads x [blocks, T]: the running max per block of rows (transposed_tile only)
};

void check_operands(const char* op, const Tensor& hidden, const Tensor& weight) {
  LMCORE_CHECK(hidden.defined() && weight.defined(), "{}: hidden and weight must be defined", op);
  LMCORE_CHECK(hidden.dim() == 2, "{}: hidden must be 2-D [N, H], found {}", op, shape_str(hidden.shape()));
  LMCORE_CHECK(weight.dim() == 2, "{}: weight must be 2-D [V, H], found {}", op, shape_str(weight.shape()));
  LMCORE_CHECK(weight.size(1) == hidden.size(1), "{}: weight is {} but hidden is {}: expected weight [V, {}]", op,
               shape_str(weight.shape()), shape_str(hidden.shape()), hidden.size(1));
  for (const Tensor* t : {&hidden, &weight})
    LMCORE_CHECK(is_floating(t->dtype()) && !is_storage_only(t->dtype()),
                 "{}: hidden and weight must be f32, f64, bf16 or f16, found {}", op, t->dtype());
  LMCORE_CHECK(hidden.dtype() == weight.dtype(), "{}: hidden is {} but weight is {}: expected the same dtype", op,
               hidden.dtype(), weight.dtype());
}

// Where d_hidden tiles go: straight into the output when it is Acc, else through an Acc tile.
template <typename Acc>
struct DhStore {
  Tensor out;  // [N, H] in hidden's dtype
  Buffer<Acc> tile;
  std::int64_t h = 0;
  Acc* begin(std::int64_t i0, std::int64_t t) {
    Acc* p = out.dtype() == dtype_of<Acc> ? out.data<Acc>() + i0 * h : tile.data();
    std::fill(p, p + t * h, Acc(0));
    return p;
  }
  void end(std::int64_t i0, std::int64_t t) {
    if (out.dtype() == dtype_of<Acc>) return;
    Tensor dst = out.narrow(0, i0, t);
    copy_cast(tile.tensor.narrow(0, 0, t * h).view({t, h}), dst);
  }
};

template <typename Acc>
struct NoDh {
  Acc* begin(std::int64_t, std::int64_t) { return nullptr; }
  void end(std::int64_t, std::int64_t) {}
};

// The tiling of a call (see linear_cross_entropy.h, Memory).
// On the matrix units the tile has a bf16 twin (the rounded d_logits): both count against the budget.
// Their products also want many token rows: oneDNN re-blocks the W operand on every call, which a
// few hundred rows do not pay for (measured with N = 4096, H = 1024 on AMX, 2 threads: 174 rows per
// whole-vocabulary tile ran the d_hidden product at ~500 GFLOPS, 4096 rows per 5461-column chunk at
// ~1300). So below kLowpMinRows whole-vocabulary rows the vocabulary is chunked with up to
// kLowpChunkRows rows per tile: two passes (4 products instead of 3) that still come out ahead.
// A forward + backward on the matrix units runs transposed (d_logits over the logits: 4 bytes a
// logit) when the weight is dense (weight_dense: row stride H) and there is no softcap. There the
// products take W and d_logits as stored, and one pass stays ahead down to kLowpTransposedMinRows
// whole-vocabulary rows (loss/tiling.h); below it, chunks of the vocabulary with up to
// kLowpChunkRows rows, two passes.
template <typename Acc, typename In>
Plan plan_for(const char* op, std::int64_t n, std::int64_t h, std::int64_t v, DType hidden_dtype, DType weight_dtype,
              bool weight_dense, const LossOptions& options, bool forward, bool backward) {
  constexpr bool kLowp = !std::is_same_v<Acc, In>;
  using loss_detail::kLowpChunkRows;
  using loss_detail::kLowpMinRows;
  using loss_detail::kLowpTransposedMinRows;
  if constexpr (kLowp) {
    if (forward && backward && options.softcap == 0 && weight_dense && h > 0) {
      return {loss_detail::choose_tiling(op, n, h, v, sizeof(Acc), options, false, 1, kLowpTransposedMinRows,
                                         kLowpChunkRows),
              true};
    }
  }
  const std::size_t tile_bytes = sizeof(Acc) + (kLowp ? sizeof(In) : 0);
  LossOptions tiled = options;
  if (!kLowp && options.memory_budget > 0 && options.chunk_size == 0 && options.token_tile == 0)
    tiled.memory_budget = loss_detail::tile_budget(n, v, sizeof(Acc), options);
  return {loss_detail::choose_tiling(op, n, h, v, tile_bytes, tiled,
                                     hidden_dtype != dtype_of<In> || weight_dtype != dtype_of<In>,
                                     kLowp ? 1 : num_threads(), kLowp ? kLowpMinRows : loss_detail::kMinRowsPerTile,
                                     kLowp ? kLowpChunkRows : loss_detail::kMinRowsPerTile),
          false};
}

// Bytes of workspace a call needs (the takes of TileBuffers, counted).
template <typename Acc, typename In>
std::size_t workspace_bytes(const char* op, std::int64_t n, std::int64_t h, std::int64_t v, DType hidden_dtype,
                            DType weight_dtype, bool hidden_direct, bool weight_direct, bool weight_dense,
                            const LossOptions& options, bool forward, bool backward) {
  const Plan plan =
      plan_for<Acc, In>(op, n, h, v, hidden_dtype, weight_dtype, weight_dense, options, forward, backward);
  Scratch count(Scratch::Mode::count, nullptr, 0);
  TileBuffers<Acc, In>(count, plan, n, h, v, FusedLce<Acc, In>::slices(), hidden_direct, weight_direct, backward,
                       hidden_dtype == dtype_of<Acc>);
  return count.used();
}

// Forward and/or backward. Returns the loss (when forward) and d_hidden (when grad_loss is defined).
template <typename Acc, typename In = Acc>
LinearCrossEntropyOutput run_fused(const char* op, const Tensor& hidden, const Tensor& weight,
                                   const Tensor& target, const LossOptions& options, bool forward,
                                   const Tensor& grad_loss, const Tensor& lse_in, Tensor d_weight, Tensor d_bias) {
  const std::int64_t n = hidden.size(0), h = hidden.size(1), v = weight.size(0);
  const LossSetup<Acc> S = loss_detail::make_setup<Acc>(op, n, v, target, options, true);
  const bool backward = grad_loss.defined();
  const bool hidden_direct = rows_direct(hidden, dtype_of<In>), weight_direct = rows_direct(weight, dtype_of<In>);
  const bool weight_dense = weight_direct && (v <= 1 || weight.stride(0) == h);
  const Plan plan =
      plan_for<Acc, In>(op, n, h, v, hidden.dtype(), weight.dtype(), weight_dense, options, forward, backward);
  Scratch scratch(Scratch::Mode::allocate, nullptr, 0);
  if (options.workspace != nullptr) {
    const std::size_t need = workspace_bytes<Acc, In>(op, n, h, v, hidden.dtype(), weight.dtype(), hidden_direct,
                                                      weight_direct, weight_dense, options, forward, backward);
    LMCORE_CHECK(options.workspace_bytes >= need,
                 "{}: the workspace holds {} bytes but the tiles need {} (linear_cross_entropy_workspace_bytes; "
                 "hidden {}, weight {})",
                 op, options.workspace_bytes, need, hidden.describe(), weight.describe());
    LMCORE_CHECK(reinterpret_cast<std::uintptr_t>(options.workspace) % 64 == 0,
                 "{}: the workspace must be 64-byte aligned, found address {}", op, options.workspace);
    scratch = Scratch(Scratch::Mode::carve, options.workspace, options.workspace_bytes);
  }
  TileBuffers<Acc, In> bufs(scratch, plan, n, h, v, FusedLce<Acc, In>::slices(), hidden_direct, weight_direct,
                            backward, hidden.dtype() == dtype_of<Acc>);
  FusedLce<Acc, In> kernel(hidden, weight, S, plan, bufs);

  LinearCrossEntropyOutput out;
  Tensor lse;
  if (forward || !lse_in.defined()) {
    lse = Tensor::empty({n}, dtype_of<Acc>);
  } else {
    LMCORE_CHECK(lse_in.dim() == 1 && lse_in.size(0) == n, "{}: lse must have shape [{}], found {}", op, n,
                 shape_str(lse_in.shape()));
    lse = lse_in.to(dtype_of<Acc>).contiguous();
  }
  if (!backward || (!forward && !lse_in.defined())) {
    // Forward only (also how a backward without the forward's lse gets it).
    Buffer<Acc> ce(n), zl(n);
    kernel.run(lse.data<Acc>(), ce.data(), zl.data(), nullptr, {}, NoDh<Acc>{});
    if (!backward) {
      LossResult r = loss_detail::finish_loss(S, ce.data(), zl.data(), lse);
      out.loss = r.loss;
      out.z_loss = r.z_loss;
      out.lse = r.lse;
      return out;
    }
  }

  const Buffer<Acc> g = loss_detail::grad_per_token<Acc>(op, grad_loss, options.reduction, n);
  GradSinks<Acc> sinks;
  Buffer<Acc> dw_buf, db_buf;
  if (d_weight.defined()) {
    LMCORE_CHECK(d_weight.dim() == 2 && d_weight.size(0) == v && d_weight.size(1) == h,
                 "{}: d_weight must have shape [{}, {}] like weight, found {}", op, v, h,
                 shape_str(d_weight.shape()));
    if (d_weight.dtype() == dtype_of<Acc> && (d_weight.stride(1) == 1 || h <= 1) && d_weight.stride(0) >= h) {
      sinks.dw = d_weight.data<Acc>();
      sinks.dw_ld = std::max<std::int64_t>(d_weight.stride(0), 1);
    } else {
      dw_buf = Buffer<Acc>::zeros(v * h);
      sinks.dw = dw_buf.data();
      sinks.dw_ld = std::max<std::int64_t>(h, 1);
    }
  }
  if (d_bias.defined()) {
    LMCORE_CHECK(d_bias.dim() == 1 && d_bias.size(0) == v, "{}: d_bias must have shape [{}], found {}", op, v,
                 shape_str(d_bias.shape()));
    db_buf = Buffer<Acc>::zeros(v);
    sinks.db = db_buf.data();
  }
  DhStore<Acc> dh{Tensor::empty({n, h}, hidden.dtype()), std::move(bufs.dh_tile), h};

  Buffer<Acc> ce, zl;
  if (forward) {
    ce = Buffer<Acc>(n);
    zl = Buffer<Acc>(n);
  }
  kernel.run(lse.data<Acc>(), forward ? ce.data() : nullptr, forward ? zl.data() : nullptr, g.data(), sinks, dh);

  if (dw_buf.data()) loss_detail::add_into(d_weight, dw_buf.tensor.view({v, h}), op);
  if (db_buf.data()) loss_detail::add_into(d_bias, db_buf.tensor, op);
  out.d_hidden = dh.out;
  if (forward) {
    LossResult r = loss_detail::finish_loss(S, ce.data(), zl.data(), lse);
    out.loss = r.loss;
    out.z_loss = r.z_loss;
  }
  out.lse = lse;
  return out;
}

template <typename... Args>
LinearCrossEntropyOutput dispatch(const char* op, const Tensor& hidden, const Tensor& weight,
                                  const LossOptions& options, Args&&... args) {
  check_operands(op, hidden, weight);
  LMCORE_CHECK(options.accumulate == DType::f32 || options.accumulate == DType::f64,
               "{}: accumulate must be f32 or f64, found {}", op, options.accumulate);
  if (options.accumulate == DType::f64) return run_fused<double>(op, hidden, weight, std::forward<Args>(args)...);
  if (lce_on_matrix_units(hidden, weight, options.accumulate))
    return run_fused<float, bf16>(op, hidden, weight, std::forward<Args>(args)...);
  return run_fused<float>(op, hidden, weight, std::forward<Args>(args)...);
}

}  // namespace

std::size_t linear_cross_entropy_workspace_bytes(std::int64_t n, std::int64_t h, std::int64_t v, DType dtype,
                                                 const LossOptions& options, bool backward) {
  const char* op = "linear_cross_entropy_workspace_bytes";
  LMCORE_CHECK(n >= 0 && h >= 1 && v >= 1, "{}: expected n >= 0, h >= 1, v >= 1, found {}, {}, {}", op, n, h, v);
  LMCORE_CHECK(is_floating(dtype) && !is_storage_only(dtype), "{}: dtype must be f32, f64, bf16 or f16, found {}", op,
               dtype);
  LMCORE_CHECK(options.accumulate == DType::f32 || options.accumulate == DType::f64,
               "{}: accumulate must be f32 or f64, found {}", op, options.accumulate);
  // Row-contiguous operands are read as they are when they already are the products' operand type.
  // With backward, enough for _with_grad and for the backward alone (whose tiles may differ).
  auto bytes = [&]<typename Acc, typename In>() {
    const bool direct = dtype == dtype_of<In>;
    const std::size_t fwd = workspace_bytes<Acc, In>(op, n, h, v, dtype, dtype, direct, direct, direct, options,
                                                     true, backward);
    if (!backward) return fwd;
    return std::max(fwd, workspace_bytes<Acc, In>(op, n, h, v, dtype, dtype, direct, direct, direct, options, false,
                                                  true));
  };
  if (options.accumulate == DType::f64) return bytes.operator()<double, double>();
  if (options.accumulate == DType::f32 && dtype == DType::bf16 && lowp_gemm_path(DType::bf16) == LowpGemmPath::onednn)
    return bytes.operator()<float, bf16>();
  return bytes.operator()<float, float>();
}

LossResult linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                const LossOptions& options) {
  LinearCrossEntropyOutput o =
      dispatch("linear_cross_entropy", hidden, weight, options, target, options, true, Tensor(), Tensor(), Tensor(),
               Tensor());
  return {o.loss, o.z_loss, o.lse};
}

Tensor linear_cross_entropy_backward(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                                     const Tensor& grad_loss, const LossOptions& options, const Tensor& lse,
                                     Tensor d_weight, Tensor d_bias) {
  LMCORE_CHECK(grad_loss.defined(), "linear_cross_entropy_backward: grad_loss is undefined");
  return dispatch("linear_cross_entropy_backward", hidden, weight, options, target, options, false, grad_loss, lse,
                  d_weight, d_bias)
      .d_hidden;
}

LinearCrossEntropyOutput linear_cross_entropy_with_grad(const Tensor& hidden, const Tensor& weight,
                                                        const Tensor& target, const LossOptions& options,
                                                        const Tensor& grad_loss, Tensor d_weight, Tensor d_bias) {
  LMCORE_CHECK(grad_loss.defined(), "linear_cross_entropy_with_grad: grad_loss is undefined");
  return dispatch("linear_cross_entropy_with_grad", hidden, weight, options, target, options, true, grad_loss,
                  Tensor(), d_weight, d_bias);
}

}  // namespace lmcore
