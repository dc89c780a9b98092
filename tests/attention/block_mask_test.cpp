#include "lmcore/attention/block_mask.h"

#include <gtest/gtest.h>

#include <set>

namespace lmcore::attention {
namespace {

BlockKind brute_kind(const MaskMod& m, std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1,
                     std::int64_t k0, std::int64_t k1) {
  bool any = false, all = true;
  for (std::int64_t q = q0; q < q1; ++q)
    for (std::int64_t kv = k0; kv < k1; ++kv) {
      if (m.allowed(b, h, q, kv)) any = true; else all = false;
    }
  return all ? BlockKind::full : any ? BlockKind::partial : BlockKind::empty;
}

// Runs of one row as a set of block indices.
std::set<std::int64_t> row_set(const BlockRuns& runs, std::int64_t row) {
  std::set<std::int64_t> s;
  for (std::int64_t i = runs.offsets[static_cast<std::size_t>(row)]; i < runs.offsets[static_cast<std::size_t>(row) + 1]; ++i)
    for (std::int32_t j = 0; j < runs.runs[static_cast<std::size_t>(i)].length; ++j)
      s.insert(runs.runs[static_cast<std::size_t>(i)].start + j);
  return s;
}

// Checks every block of bm against element-wise evaluation. exact: no conservative partials.
void check_against_brute_force(const BlockMask& bm, bool exact) {
  SCOPED_TRACE(bm.describe());
  for (std::int64_t b = 0; b < bm.batch; ++b) {
    for (std::int64_t h = 0; h < bm.heads; ++h) {
      const std::int64_t g = b * bm.heads + h;
      for (std::int64_t qi = 0; qi < bm.num_q_blocks; ++qi) {
        const auto partial = row_set(bm.partial, g * bm.num_q_blocks + qi);
        const auto full = row_set(bm.full, g * bm.num_q_blocks + qi);
        for (std::int64_t ki = 0; ki < bm.num_kv_blocks; ++ki) {
          const std::int64_t q0 = qi * bm.q_block, q1 = std::min(bm.q_len, q0 + bm.q_block);
          const std::int64_t k0 = ki * bm.kv_block, k1 = std::min(bm.kv_len, k0 + bm.kv_block);
          const BlockKind want = brute_kind(bm.mask, b, h, q0, q1, k0, k1);
          const bool in_p = partial.count(ki) > 0, in_f = full.count(ki) > 0;
          ASSERT_FALSE(in_p && in_f) << "block (" << qi << ", " << ki << ") in both lists";
          // Transposed lists hold the same blocks.
          ASSERT_EQ(row_set(bm.partial_t, g * bm.num_kv_blocks + ki).count(qi) > 0, in_p) << qi << "," << ki;
          ASSERT_EQ(row_set(bm.full_t, g * bm.num_kv_blocks + ki).count(qi) > 0, in_f) << qi << "," << ki;
          if (in_f) {
            ASSERT_EQ(want, BlockKind::full) << "block (" << qi << ", " << ki << ") listed full";
          }
          if (!in_p && !in_f) {
            ASSERT_EQ(want, BlockKind::empty) << "block (" << qi << ", " << ki << ") skipped";
          }
          if (exact) {
            const BlockKind got = in_f ? BlockKind::full : in_p ? BlockKind::partial : BlockKind::empty;
            ASSERT_EQ(got, want) << "block (" << qi << ", " << ki << ")";
          }
        }
      }
    }
  }
}

std::vector<std::int64_t> docs(std::int64_t n) {
  // Documents of lengths 1, 7, 20, 3, 40, ... (uneven, some shorter than a block).
  std::vector<std::int64_t> ids;
  const std::int64_t lengths[] = {1, 7, 20, 3, 40, 13, 64, 2};
  std::int64_t doc = 0;
  while (static_cast<std::int64_t>(ids.size()) < n) {
    for (std::int64_t i = 0; i < lengths[doc % 8] && static_cast<std::int64_t>(ids.size()) < n; ++i) ids.push_back(doc);
    ++doc;
  }
  return ids;
}

TEST(BlockMask, BuiltinsClassifyExactly) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> lens = {{1, 1}, {5, 9}, {37, 37}, {64, 50}, {100, 131}};
  for (const auto& [L, S] : lens) {
    const std::vector<MaskMod> masks = {MaskMod::all(),          MaskMod::causal(),     MaskMod::sliding_window(0),
                                        MaskMod::sliding_window(5), MaskMod::sliding_window(40),
                                        MaskMod::prefix_lm(11),   MaskMod::chunked(9),   MaskMod::chunked(16),
                                        MaskMod::document(docs(std::max(L, S)))};
    for (const auto& m : masks) {
      for (const auto& [bq, bk] : std::vector<std::pair<std::int64_t, std::int64_t>>{{16, 16}, {8, 32}, {128, 128}}) {
        check_against_brute_force(create_block_mask(m, 1, 1, L, S, bq, bk), true);
      }
    }
  }
}

TEST(BlockMask, CompositionsAndCallablesAreSound) {
  auto user = MaskMod::from_function([](std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) {
    return (q + 2 * kv + b + h) % 5 != 0 && kv < 90;
  });
  const std::vector<MaskMod> masks = {
      MaskMod::causal() & MaskMod::document(docs(120)),
      MaskMod::sliding_window(20) | MaskMod::prefix_lm(10),
      !MaskMod::causal(),
      (!(MaskMod::chunked(16) & MaskMod::causal())) | MaskMod::sliding_window(3),
      user,
      user & MaskMod::causal(),
  };
  for (const auto& m : masks) {
    const BlockMask bm = create_block_mask(m, 2, 3, 97, 120, 16, 8);
    check_against_brute_force(bm, false);
  }
  // A callable is classified element by element: exact, per batch and head.
  const BlockMask bm = create_block_mask(user, 2, 3, 50, 100, 8, 8);
  EXPECT_EQ(bm.batch, 2);
  EXPECT_EQ(bm.heads, 3);
  check_against_brute_force(bm, true);
}

TEST(BlockMask, UnsortedDocumentsFallBackToElements) {
  std::vector<std::int64_t> ids(70);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 7) % 3);
  check_against_brute_force(create_block_mask(MaskMod::document(ids), 1, 1, 70, 70, 16, 16), true);
}

TEST(BlockMask, SizeIsProportionalToRunsNotElements) {
  // Causal at L = S = 1,048,576: 8192 query blocks, one full run and one partial block each.
  const std::int64_t n = 1 << 20;
  const BlockMask bm = create_block_mask(MaskMod::causal(), 1, 1, n, n);
  EXPECT_EQ(bm.num_q_blocks, 8192);
  EXPECT_EQ(bm.partial.total_blocks(), 8192);
  EXPECT_EQ(bm.full.total_blocks(), 8192LL * 8191 / 2);
  EXPECT_EQ(bm.full.runs.size(), 8191u);
  EXPECT_LT(bm.bytes(), 1u << 20);
  EXPECT_NEAR(bm.block_density(), 8193.0 / 2 / 8192, 1e-9);
  const BlockMask sw = create_block_mask(MaskMod::sliding_window(256), 1, 1, 32768, 32768);
  EXPECT_EQ(sw.nonempty_blocks(), 256 + 255 + 254);  // the diagonal block and 1 and 2 blocks back
  EXPECT_NEAR(sw.element_density(), (257.0 * 32768 - 256.0 * 257 / 2) / (32768.0 * 32768), 1e-12);
}

TEST(BlockMask, Validation) {
  EXPECT_THROW(create_block_mask(MaskMod::causal(), 0, 1, 10, 10), Error);
  EXPECT_THROW(create_block_mask(MaskMod::causal(), 1, 1, 10, 10, 0, 16), Error);
  EXPECT_THROW(MaskMod::sliding_window(-1), Error);
  EXPECT_THROW(MaskMod::chunked(0), Error);
  EXPECT_THROW(create_block_mask(MaskMod::document({0, 0, 1}), 1, 1, 10, 10), Error);
}

// block_kinds gives the dense table of every block; block_mask_from_kinds rebuilds the same lists from it.
TEST(BlockMask, KindsTableRoundTrips) {
  for (const MaskMod& m : {MaskMod::sliding_window(40), MaskMod::document(docs(150)) & MaskMod::causal(),
                           MaskMod::from_function([](std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) {
                             return (q + kv + b + 2 * h) % 5 != 0 && kv <= q;
                           })}) {
    const BlockMask bm = create_block_mask(m, 2, 3, 150, 130, 32, 16);
    const std::vector<std::uint8_t> kinds = block_kinds(bm);
    ASSERT_EQ(static_cast<std::int64_t>(kinds.size()), bm.batch * bm.heads * bm.num_q_blocks * bm.num_kv_blocks);
    std::int64_t partial = 0, full = 0;
    for (std::uint8_t k : kinds) {
      if (k == 1) ++partial;
      if (k == 2) ++full;
    }
    EXPECT_EQ(partial, bm.partial.total_blocks());
    EXPECT_EQ(full, bm.full.total_blocks());
    const BlockMask back = block_mask_from_kinds(m, kinds, bm.batch, bm.heads, 150, 130, 32, 16);
    EXPECT_EQ(block_kinds(back), kinds);
    check_against_brute_force(back, /*exact=*/false);
    EXPECT_EQ(back.built_batch, bm.batch);
  }
  std::vector<std::uint8_t> kinds(4 * 2, 2);
  EXPECT_NO_THROW(block_mask_from_kinds(MaskMod::all(), kinds, 1, 1, 64, 32, 16, 16));
  kinds[5] = 3;
  EXPECT_THROW(block_mask_from_kinds(MaskMod::all(), kinds, 1, 1, 64, 32, 16, 16), Error);
  kinds.pop_back();
  EXPECT_THROW(block_mask_from_kinds(MaskMod::all(), kinds, 1, 1, 64, 32, 16, 16), Error);
}

}  // namespace
}  // namespace lmcore::attention
