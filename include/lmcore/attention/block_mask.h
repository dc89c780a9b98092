// lmcore/attention/block_mask.h — the block-sparse structure flex attention iterates over.
//
// The (q, kv) grid is cut into blocks of q_block x kv_block. For every (batch, head, query block) a
// BlockMask lists the key blocks that are partially allowed (the mask is evaluated element by element
// there) and those that are fully allowed (no mask evaluation at all); the transposed lists give, for
// every key block, the query blocks, for the backward pass. Blocks in neither list are skipped.
//
// Lists are stored as runs of consecutive block indices (a causal row is one run of full blocks and
// one partial block), so memory is proportional to the number of runs, never to B x H x L x S: a
// causal mask at L = S = 1,048,576 with 128-blocks takes a few hundred kilobytes.
//
//   BlockMask bm = create_block_mask(MaskMod::sliding_window(256), /*B=*/1, /*H=*/1, L, S);
//   fmt::print("{} blocks, density {}\n", bm.nonempty_blocks(), bm.block_density());
//   Tensor out = flex_attention(q, k, v, {.block_mask = &bm});
//
// B and H may be 1 to broadcast over the batch and the heads of q; any other value must match q's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmcore/attention/mask_mod.h"

namespace lmcore::attention {

// Consecutive block indices [start, start + length).
struct BlockRun {
  std::int32_t start;
  std::int32_t length;
};

// Runs per row in CSR form: the runs of row r are runs[offsets[r] .. offsets[r + 1]).
struct BlockRuns {
  std::vector<std::int64_t> offsets;
  std::vector<BlockRun> runs;

  std::int64_t rows() const { return static_cast<std::int64_t>(offsets.size()) - 1; }
  std::int64_t blocks_in_row(std::int64_t r) const;
  std::int64_t total_blocks() const;
  std::size_t bytes() const { return offsets.capacity() * sizeof(std::int64_t) + runs.capacity() * sizeof(BlockRun); }
};

struct BlockMask {
  std::int64_t batch = 1, heads = 1;      // 1 broadcasts
  std::int64_t q_len = 0, kv_len = 0;
  std::int64_t q_block = 128, kv_block = 128;
  std::int64_t num_q_blocks = 0, num_kv_blocks = 0;
  // Rows indexed (b * heads + h) * num_q_blocks + q_block_index, entries are key block indices.
  BlockRuns partial, full;
  // Rows indexed (b * heads + h) * num_kv_blocks + kv_block_index, entries are query block indices.
  BlockRuns partial_t, full_t;
  MaskMod mask;  // evaluated inside partial blocks
  // The B and H it was built for (1: broadcast). A mask that ignores (b, h) keeps one row set
  // (batch = heads = 1 above), yet running it on another batch or head count is still an error.
  std::int64_t built_batch = 1, built_heads = 1;

  std::int64_t nonempty_blocks() const { return partial.total_blocks() + full.total_blocks(); }
  // Non-empty blocks / all blocks of the B x H grid.
  double block_density() const;
  // Allowed (q, kv) pairs / (B x H x L x S). Evaluates the mask inside partial blocks (only there).
  double element_density() const;
  // Bytes held by the block lists.
  std::size_t bytes() const;
  std::string describe() const;
};

// Builds the block mask of `mask` for a B x H x L x S problem. Memory and time are proportional to the
// number of blocks inside each row's kv_bound (built-ins: closed form per block; callables: every
// element of those blocks once). Rows are built in parallel.
BlockMask create_block_mask(const MaskMod& mask, std::int64_t batch, std::int64_t heads, std::int64_t q_len,
                            std::int64_t kv_len, std::int64_t q_block = 128, std::int64_t kv_block = 128);

// Every block full: plain dense attention (what flex_attention uses when given no block mask).
BlockMask full_block_mask(std::int64_t q_len, std::int64_t kv_len, std::int64_t q_block = 128,
                          std::int64_t kv_block = 128);
// Every block partial, with the mask evaluated everywhere: the dense explicit-mask baseline.
BlockMask dense_block_mask(const MaskMod& mask, std::int64_t batch, std::int64_t heads, std::int64_t q_len,
                           std::int64_t kv_len, std::int64_t q_block = 128, std::int64_t kv_block = 128);

// The kind of every block (BlockKind values: 0 empty, 1 partial, 2 full) as a dense table
// [mask.batch][mask.heads][num_q_blocks][num_kv_blocks]: what PyTorch's BlockMask.to_dense and
// as_tuple show. Its size is the number of blocks, so only for masks whose block grid is small.
std::vector<std::uint8_t> block_kinds(const BlockMask& mask);
// The inverse: a block mask from such a table for a batch x heads grid (1 broadcasts), with `mask`
// evaluated inside the partial blocks. built_batch/built_heads are batch/heads. Throws on a kind > 2
// or a table of the wrong size.
BlockMask block_mask_from_kinds(const MaskMod& mask, const std::vector<std::uint8_t>& kinds, std::int64_t batch,
                                std::int64_t heads, std::int64_t q_len, std::int64_t kv_len, std::int64_t q_block,
                                std::int64_t kv_block);

}  // namespace lmcore::attention
