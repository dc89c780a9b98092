// create_block_mask: classify the blocks inside each query block's key bound, store runs of block
// indices per row, and transpose them for the backward pass. See lmcore/attention/block_mask.h.
#include "lmcore/attention/block_mask.h"

#include <algorithm>
#include <vector>

#include "lmcore/core/parallel.h"
#include "lmcore/core/runtime_info.h"

namespace lmcore::attention {

std::int64_t BlockRuns::blocks_in_row(std::int64_t r) const {
  std::int64_t n = 0;
  for (std::int64_t i = offsets[static_cast<std::size_t>(r)]; i < offsets[static_cast<std::size_t>(r) + 1]; ++i)
    n += runs[static_cast<std::size_t>(i)].length;
  return n;
}

std::int64_t BlockRuns::total_blocks() const {
  std::int64_t n = 0;
  for (const BlockRun& r : runs) n += r.length;
  return n;
}

double BlockMask::block_density() const {
  const double all = static_cast<double>(batch) * heads * num_q_blocks * num_kv_blocks;
  return all > 0 ? static_cast<double>(nonempty_blocks()) / all : 0.0;
}

std::size_t BlockMask::bytes() const {
  return sizeof(BlockMask) + partial.bytes() + full.bytes() + partial_t.bytes() + full_t.bytes();
}

double BlockMask::element_density() const {
  const std::int64_t rows = batch * heads * num_q_blocks;
  std::vector<double> allowed(static_cast<std::size_t>(rows), 0.0);
  parallel_for(0, rows, 1, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<std::uint8_t> tile(static_cast<std::size_t>(q_block * kv_block));
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t qi = r % num_q_blocks, bh = r / num_q_blocks;
      const std::int64_t b = bh / heads, h = bh % heads;
      const std::int64_t q0 = qi * q_block, nq = std::min(q_block, q_len - q0);
      double count = 0;
      auto each = [&](const BlockRuns& runs, bool evaluate) {
        for (std::int64_t i = runs.offsets[static_cast<std::size_t>(r)]; i < runs.offsets[static_cast<std::size_t>(r) + 1]; ++i) {
          const BlockRun run = runs.runs[static_cast<std::size_t>(i)];
          for (std::int64_t kb = run.start; kb < run.start + run.length; ++kb) {
            const std::int64_t k0 = kb * kv_block, nk = std::min(kv_block, kv_len - k0);
            if (!evaluate) { count += static_cast<double>(nq * nk); continue; }
            mask.fill(b, h, q0, nq, k0, nk, tile.data(), nk);
            for (std::int64_t j = 0; j < nq * nk; ++j) count += tile[static_cast<std::size_t>(j)];
          }
        }
      };
      each(full, false);
      each(partial, true);
      allowed[static_cast<std::size_t>(r)] = count;
    }
  });
  double total = 0;
  for (double a : allowed) total += a;
  const double all = static_cast<double>(batch) * heads * q_len * kv_len;
  return all > 0 ? total / all : 0.0;
}

std::string BlockMask::describe() const {
  return fmt::format("BlockMask({}, B={}, H={}, L={}, S={}, blocks {}x{}: {} partial + {} full of {} ({:.4f}), {} bytes)",
                     mask.describe(), built_batch, built_heads, q_len, kv_len, q_block, kv_block, partial.total_blocks(),
                     full.total_blocks(), batch * heads * num_q_blocks * num_kv_blocks, block_density(), bytes());
}

namespace {

void append_block(std::vector<BlockRun>& runs, std::int64_t index) {
  if (!runs.empty() && runs.back().start + runs.back().length == index) {
    ++runs.back().length;
  } else {
    runs.push_back({static_cast<std::int32_t>(index), 1});
  }
}

BlockRuns flatten(std::vector<std::vector<BlockRun>>& rows) {
  BlockRuns out;
  out.offsets.resize(rows.size() + 1);
  std::size_t total = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out.offsets[r] = static_cast<std::int64_t>(total);
    total += rows[r].size();
  }
  out.offsets[rows.size()] = static_cast<std::int64_t>(total);
  out.runs.reserve(total);
  for (auto& row : rows) {
    out.runs.insert(out.runs.end(), row.begin(), row.end());
    std::vector<BlockRun>().swap(row);
  }
  return out;
}

// The transposed lists: for each (b, h, key block), the runs of query blocks. Columns are cut into
// chunks; each chunk scans every row's runs clipped to its columns, appending in increasing row order.
BlockRuns transpose(const BlockRuns& rows_in, std::int64_t groups, std::int64_t nq, std::int64_t nk) {
  std::vector<std::vector<BlockRun>> cols(static_cast<std::size_t>(groups * nk));
  constexpr std::int64_t kChunk = 64;
  const std::int64_t chunks = (nk + kChunk - 1) / kChunk;
  parallel_for(0, groups * chunks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t item = lo; item < hi; ++item) {
      const std::int64_t g = item / chunks, c0 = item % chunks * kChunk, c1 = std::min(nk, c0 + kChunk);
      for (std::int64_t qi = 0; qi < nq; ++qi) {
        const std::size_t r = static_cast<std::size_t>(g * nq + qi);
        for (std::int64_t i = rows_in.offsets[r]; i < rows_in.offsets[r + 1]; ++i) {
          const BlockRun run = rows_in.runs[static_cast<std::size_t>(i)];
          const std::int64_t a = std::max<std::int64_t>(run.start, c0);
          const std::int64_t e = std::min<std::int64_t>(run.start + run.length, c1);
          for (std::int64_t kb = a; kb < e; ++kb) append_block(cols[static_cast<std::size_t>(g * nk + kb)], qi);
        }
      }
    }
  });
  return flatten(cols);
}

void check_sizes(const char* op, std::int64_t batch, std::int64_t heads, std::int64_t q_len, std::int64_t kv_len,
                 std::int64_t q_block, std::int64_t kv_block) {
  LMCORE_CHECK(batch >= 1 && heads >= 1, "{}: expected batch >= 1 and heads >= 1, found {} and {}", op, batch, heads);
  LMCORE_CHECK(q_len >= 0 && kv_len >= 0, "{}: expected lengths >= 0, found L={} S={}", op, q_len, kv_len);
  LMCORE_CHECK(q_block >= 1 && kv_block >= 1 && q_block <= 4096 && kv_block <= 4096,
               "{}: expected block sizes in [1, 4096], found {} x {}", op, q_block, kv_block);
  const std::int64_t nk = (kv_len + kv_block - 1) / kv_block, nq = (q_len + q_block - 1) / q_block;
  LMCORE_CHECK(nk < INT32_MAX && nq < INT32_MAX, "{}: too many blocks ({} x {})", op, nq, nk);
}

// The block lists cost about kRowBytes per (b, h, query block) row and as much per key block row
// (two vectors while building, offsets after). A mask whose lists cannot fit in this machine's memory
// is refused with the sizes, instead of surfacing as a bare std::bad_alloc (B = H = 2^20 asks for
// tens of TiB).
constexpr std::uint64_t kRowBytes = 2 * sizeof(std::vector<BlockRun>) + 4 * sizeof(std::int64_t);

void check_fits(const char* op, std::int64_t batch, std::int64_t heads, std::int64_t nq, std::int64_t nk) {
  std::uint64_t groups = 0, rows = 0, bytes = 0;
  const bool overflow = __builtin_mul_overflow(static_cast<std::uint64_t>(batch), static_cast<std::uint64_t>(heads), &groups) ||
                        __builtin_mul_overflow(groups, static_cast<std::uint64_t>(std::max<std::int64_t>(1, nq + nk)), &rows) ||
                        __builtin_mul_overflow(rows, kRowBytes, &bytes);
  const std::uint64_t memory = physical_memory_bytes();
  if (overflow || (memory > 0 && bytes > memory))
    fail("{}: batch {} x heads {} x ({} query + {} key blocks) needs {} for its block lists, more than this machine's "
         "{:.1f} GiB; use a smaller batch or heads, or a mask_mod that ignores b and h (built once and broadcast)",
         op, batch, heads, nq, nk, overflow ? std::string("more than 2^64 bytes") : fmt::format("about {:.1f} GiB", static_cast<double>(bytes) / (1 << 30)),
         static_cast<double>(memory) / (1 << 30));
}

BlockMask skeleton(const MaskMod& mask, std::int64_t batch, std::int64_t heads, std::int64_t q_len,
                   std::int64_t kv_len, std::int64_t q_block, std::int64_t kv_block) {
  BlockMask bm;
  bm.batch = batch;
  bm.heads = heads;
  bm.q_len = q_len;
  bm.kv_len = kv_len;
  bm.q_block = q_block;
  bm.kv_block = kv_block;
  bm.num_q_blocks = (q_len + q_block - 1) / q_block;
  bm.num_kv_blocks = (kv_len + kv_block - 1) / kv_block;
  bm.mask = mask;
  check_fits("create_block_mask", batch, heads, bm.num_q_blocks, bm.num_kv_blocks);
  return bm;
}

void finish(BlockMask& bm, std::vector<std::vector<BlockRun>>& partial, std::vector<std::vector<BlockRun>>& full) {
  bm.partial = flatten(partial);
  bm.full = flatten(full);
  const std::int64_t groups = bm.batch * bm.heads;
  bm.partial_t = transpose(bm.partial, groups, bm.num_q_blocks, bm.num_kv_blocks);
  bm.full_t = transpose(bm.full, groups, bm.num_q_blocks, bm.num_kv_blocks);
}

}  // namespace

BlockMask create_block_mask(const MaskMod& mask, std::int64_t batch, std::int64_t heads, std::int64_t q_len,
                            std::int64_t kv_len, std::int64_t q_block, std::int64_t kv_block) {
  check_sizes("create_block_mask", batch, heads, q_len, kv_len, q_block, kv_block);
  const std::int64_t built_batch = batch, built_heads = heads;
  // A mask that ignores (b, h) is built once and broadcast.
  if (mask.independent_of_batch_and_head()) batch = heads = 1;
  BlockMask bm = skeleton(mask, batch, heads, q_len, kv_len, q_block, kv_block);
  bm.built_batch = built_batch;
  bm.built_heads = built_heads;
  const std::int64_t rows = batch * heads * bm.num_q_blocks;
  std::vector<std::vector<BlockRun>> partial(static_cast<std::size_t>(rows)), full(static_cast<std::size_t>(rows));
  parallel_for(0, rows, 16, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t qi = r % bm.num_q_blocks, bh = r / bm.num_q_blocks;
      const std::int64_t b = bh / heads, h = bh % heads;
      const std::int64_t q0 = qi * q_block, q1 = std::min(q_len, q0 + q_block);
      const auto [klo, khi] = mask.kv_bound(b, h, q0, q1, kv_len);
      if (klo >= khi) continue;
      for (std::int64_t kb = klo / kv_block; kb < (khi + kv_block - 1) / kv_block; ++kb) {
        const std::int64_t k0 = kb * kv_block, k1 = std::min(kv_len, k0 + kv_block);
        const BlockKind kind = mask.classify(b, h, q0, q1, k0, k1);
        if (kind == BlockKind::full) append_block(full[static_cast<std::size_t>(r)], kb);
        else if (kind == BlockKind::partial) append_block(partial[static_cast<std::size_t>(r)], kb);
      }
    }
  });
  finish(bm, partial, full);
  return bm;
}

BlockMask full_block_mask(std::int64_t q_len, std::int64_t kv_len, std::int64_t q_block, std::int64_t kv_block) {
  check_sizes("full_block_mask", 1, 1, q_len, kv_len, q_block, kv_block);
  BlockMask bm = skeleton(MaskMod::all(), 1, 1, q_len, kv_len, q_block, kv_block);
  std::vector<std::vector<BlockRun>> partial(static_cast<std::size_t>(bm.num_q_blocks)), full(partial.size());
  if (bm.num_kv_blocks > 0)
    for (auto& row : full) row.push_back({0, static_cast<std::int32_t>(bm.num_kv_blocks)});
  finish(bm, partial, full);
  return bm;
}

BlockMask dense_block_mask(const MaskMod& mask, std::int64_t batch, std::int64_t heads, std::int64_t q_len,
                           std::int64_t kv_len, std::int64_t q_block, std::int64_t kv_block) {
  check_sizes("dense_block_mask", batch, heads, q_len, kv_len, q_block, kv_block);
  const std::int64_t built_batch = batch, built_heads = heads;
  // A mask that ignores (b, h) is built once and broadcast.
  if (mask.independent_of_batch_and_head()) batch = heads = 1;
  BlockMask bm = skeleton(mask, batch, heads, q_len, kv_len, q_block, kv_block);
  bm.built_batch = built_batch;
  bm.built_heads = built_heads;
  std::vector<std::vector<BlockRun>> partial(static_cast<std::size_t>(batch * heads * bm.num_q_blocks)),
      full(partial.size());
  if (bm.num_kv_blocks > 0)
    for (auto& row : partial) row.push_back({0, static_cast<std::int32_t>(bm.num_kv_blocks)});
  finish(bm, partial, full);
  return bm;
}

std::vector<std::uint8_t> block_kinds(const BlockMask& mask) {
  const std::int64_t nq = mask.num_q_blocks, nk = mask.num_kv_blocks, rows = mask.batch * mask.heads * nq;
  std::vector<std::uint8_t> kinds(static_cast<std::size_t>(rows * nk), static_cast<std::uint8_t>(BlockKind::empty));
  auto mark = [&](const BlockRuns& runs, BlockKind kind) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = runs.offsets[static_cast<std::size_t>(r)]; i < runs.offsets[static_cast<std::size_t>(r) + 1]; ++i) {
        const BlockRun run = runs.runs[static_cast<std::size_t>(i)];
        for (std::int64_t kb = run.start; kb < run.start + run.length; ++kb)
          kinds[static_cast<std::size_t>(r * nk + kb)] = static_cast<std::uint8_t>(kind);
      }
  };
  mark(mask.partial, BlockKind::partial);
  mark(mask.full, BlockKind::full);
  return kinds;
}

BlockMask block_mask_from_kinds(const MaskMod& mask, const std::vector<std::uint8_t>& kinds, std::int64_t batch,
                                std::int64_t heads, std::int64_t q_len, std::int64_t kv_len, std::int64_t q_block,
                                std::int64_t kv_block) {
  check_sizes("block_mask_from_kinds", batch, heads, q_len, kv_len, q_block, kv_block);
  BlockMask bm = skeleton(mask, batch, heads, q_len, kv_len, q_block, kv_block);
  bm.built_batch = batch;
  bm.built_heads = heads;
  const std::int64_t nq = bm.num_q_blocks, nk = bm.num_kv_blocks, rows = batch * heads * nq;
  LMCORE_CHECK(static_cast<std::int64_t>(kinds.size()) == rows * nk,
               "block_mask_from_kinds: expected {} block kinds ([{}, {}, {}, {}]), found {}", rows * nk, batch, heads,
               nq, nk, kinds.size());
  std::vector<std::vector<BlockRun>> partial(static_cast<std::size_t>(rows)), full(partial.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t kb = 0; kb < nk; ++kb) {
      const std::uint8_t kind = kinds[static_cast<std::size_t>(r * nk + kb)];
      LMCORE_CHECK(kind <= 2, "block_mask_from_kinds: block kind at flat index {} is {}, expected 0 (empty), 1 "
                   "(partial) or 2 (full)", r * nk + kb, kind);
      if (kind == static_cast<std::uint8_t>(BlockKind::partial)) append_block(partial[static_cast<std::size_t>(r)], kb);
      if (kind == static_cast<std::uint8_t>(BlockKind::full)) append_block(full[static_cast<std::size_t>(r)], kb);
    }
  finish(bm, partial, full);
  return bm;
}

}  // namespace lmcore::attention
