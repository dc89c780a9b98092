// How the fused linear cross-entropy cuts [N x V] into tiles (see linear_cross_entropy.h, Memory).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "lmcore/core/error.h"
#include "lmcore/core/matmul.h"
#include "lmcore/loss/cross_entropy.h"

namespace lmcore::loss_detail {

struct Tiling {
  std::int64_t rows = 1;   // T: tokens per tile
  std::int64_t cols = 1;   // C: vocabulary columns per chunk (C >= V: one chunk, single-pass fwd+bwd)
  std::int64_t panel = 1;  // P: weight rows converted to Acc at a time (= C when no conversion is needed)
};

// Fewest rows a whole-vocabulary tile may have before the vocabulary is chunked instead: below this
// the GEMMs get too thin to run at full speed.
inline constexpr std::int64_t kMinRowsPerTile = 64;

// On the matrix units (bf16 products through oneDNN, f32 tile; see linear_cross_entropy.cpp) the
// products want more rows than BLAS's: below kLowpMinRows whole-vocabulary rows the untransposed
// tile chunks the vocabulary with up to kLowpChunkRows rows per tile (two passes, 4 products). The
// transposed forward + backward tile keeps one pass down to kLowpTransposedMinRows rows: its three
// products per token row cost the same at 128-row tiles as two passes of 4096-row chunks cost with
// their fourth product (N 4096, H 1024, V 128256, 2 threads: 1.68 vs 1.65 ms a row on Zen 5 with
// AVX-512 BF16, 1.12 vs 1.12 on a Xeon with AMX), and less from there up (256 rows: 1.40 and 0.92),
// so one pass from 160 rows; the whole call at 256 rows took 5.68 s against 6.57 for the chunks on
// Zen 5, 4.60 s against 6.22 on the Xeon.
inline constexpr std::int64_t kLowpMinRows = 512;
inline constexpr std::int64_t kLowpChunkRows = 4096;
inline constexpr std::int64_t kLowpTransposedMinRows = 160;

// The bytes the automatic tiling may give the logits tile (BLAS paths): options.memory_budget, but no
// more than a share of the [N, V] logits in the accumulation type, which the unfused path (torch's
// nn.Linear + cross_entropy) holds about three times over (logits, softmax, their gradient), and never
// under kMinTileBudget. So the fused path's extra memory stays a fixed small fraction of what the
// unfused one needs, also for short batches where 128 MiB would be half of it. Measured with
// N = 2048, H = 1024, V = 32000, f32, 2 threads (lmcore.torch vs nn.Linear + CrossEntropyLoss,
// bench/compare_torch.py --torch-api): the 128 MiB tile made lmcore's peak growth 1/2.8 of torch's,
// an eighth (31 MiB) 1/4.4 with OpenBLAS's GEMMs (Intel). With oneDNN's f32 GEMMs (Zen 5), whose
// first call also maps ~11 MiB of their code, an eighth grew 184-194 MiB (1/3.9-1/4.1 of torch's 757)
// and a twelfth (21 MiB) 169-179 MiB, for ~5% of the speed (every tile re-reads W and re-writes
// d_weight); so the share is a twelfth on that path and an eighth otherwise. At N >= 4096 or
// V = 128256 the rule leaves 128 MiB as it was. Not applied on the matrix units, whose products need
// the rows (see linear_cross_entropy.cpp), nor when the caller sets chunk_size or token_tile.
inline std::int64_t unfused_share(std::size_t acc_size) {
  return acc_size == sizeof(float) && f32_gemm_path() == F32GemmPath::onednn ? 12 : 8;
}
inline constexpr std::int64_t kMinTileBudget = std::int64_t{8} << 20;
inline std::int64_t tile_budget(std::int64_t n, std::int64_t v, std::size_t acc_size, const LossOptions& o) {
  const double unfused = static_cast<double>(n) * static_cast<double>(v) * static_cast<double>(acc_size);
  const double share = static_cast<double>(unfused_share(acc_size));
  const std::int64_t cap = static_cast<std::int64_t>(std::min(unfused / share, 9.0e18));
  return std::min(o.memory_budget, std::max(cap, kMinTileBudget));
}

// `slices`: how many threads convert weight panels at once (each has its own panel buffer).
// `min_rows`: the fewest rows a whole-vocabulary tile may have; below it the vocabulary is chunked
// with `chunk_rows` rows per tile (both kMinRowsPerTile for BLAS; larger on the matrix units, see
// linear_cross_entropy.cpp).
inline Tiling choose_tiling(const char* op, std::int64_t n, std::int64_t h, std::int64_t v, std::size_t acc_size,
                            const LossOptions& o, bool converts_weight, std::int64_t slices = 1,
                            std::int64_t min_rows = kMinRowsPerTile, std::int64_t chunk_rows = kMinRowsPerTile) {
  LMCORE_CHECK(o.chunk_size >= 0, "{}: chunk_size must be >= 0 (0 = automatic), found {}", op, o.chunk_size);
  LMCORE_CHECK(o.token_tile >= 0, "{}: token_tile must be >= 0 (0 = automatic), found {}", op, o.token_tile);
  LMCORE_CHECK(o.memory_budget > 0, "{}: memory_budget must be > 0 bytes, found {}", op, o.memory_budget);
  const std::int64_t acc = static_cast<std::int64_t>(acc_size);
  const std::int64_t budget = o.memory_budget;
  Tiling t;
  std::int64_t rows = o.token_tile, cols = o.chunk_size > 0 ? std::min(o.chunk_size, v) : 0;
  if (rows == 0 && cols == 0) {
    rows = budget / (v * acc);
    if (rows >= min_rows || rows >= n) {
      cols = v;
      // As many tiles as the budget needs, evened out: no thin last tile that re-reads all of W
      // for a few rows (2048 rows at 170 a tile: 13 tiles of 158 rather than 12 of 170 and one of 8).
      if (rows < n) rows = (n + (n + rows - 1) / rows - 1) / ((n + rows - 1) / rows);
    } else {
      rows = std::max<std::int64_t>(1, std::min(chunk_rows, n));
      cols = std::clamp<std::int64_t>(budget / (rows * acc), 1, v);
    }
  } else if (rows == 0) {
    rows = budget / (cols * acc);
  } else if (cols == 0) {
    cols = std::clamp<std::int64_t>(budget / (rows * acc), 1, v);
  }
  t.rows = std::clamp<std::int64_t>(rows, 1, std::max<std::int64_t>(n, 1));
  t.cols = cols;
  // Conversion panels take an eighth of the budget on top of the tile, shared by the slices (a
  // slice's panel of ~1000+ rows already keeps its GEMMs at full speed).
  const std::int64_t panel_bytes = budget / 8 / std::max<std::int64_t>(slices, 1);
  t.panel = converts_weight ? std::clamp<std::int64_t>(panel_bytes / (std::max<std::int64_t>(h, 1) * acc), 1, cols)
                            : cols;
  return t;
}

}  // namespace lmcore::loss_detail
