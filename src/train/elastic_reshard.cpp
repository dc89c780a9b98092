// Moving sharded state from one world size to another over the network, as one all_to_all_single:
// every rank sends each other rank exactly the elements that rank's new shards need, from the old
// shards it provides (its own, or its replica of a lost neighbour's).
#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "lmcore/core/error.h"
#include "src/train/elastic.h"

namespace lmcore::train::detail {

namespace {
std::int64_t shard_of(std::int64_t numel, int world) { return (numel + world - 1) / world; }
}  // namespace

std::vector<std::int64_t> local_offsets(const std::vector<std::int64_t>& unit_numel, int world) {
  std::vector<std::int64_t> out{0};
  for (std::int64_t n : unit_numel) out.push_back(out.back() + shard_of(n, world));
  return out;
}

std::vector<Piece> plan_pieces(const std::vector<std::int64_t>& unit_numel, int old_world, int new_world,
                               const std::vector<Provider>& providers) {
  LMCORE_CHECK(old_world >= 1 && new_world >= 1, "re-shard: world sizes must be >= 1, found {} -> {}", old_world,
               new_world);
  LMCORE_CHECK(static_cast<int>(providers.size()) == old_world, "re-shard: {} providers for {} old ranks",
               providers.size(), old_world);
  for (int o = 0; o < old_world; ++o)
    LMCORE_CHECK(providers[o].new_rank >= 0 && providers[o].new_rank < new_world,
                 "re-shard: old rank {}'s shards have no provider among the {} ranks (provider {})", o, new_world,
                 providers[o].new_rank);
  std::vector<Piece> out;
  for (std::size_t u = 0; u < unit_numel.size(); ++u) {
    const std::int64_t n = unit_numel[u], so = shard_of(n, old_world), sn = shard_of(n, new_world);
    for (int o = 0; o < old_world; ++o) {
      const std::int64_t ob = std::min(n, o * so), oe = std::min(n, (o + 1) * so);
      if (ob >= oe) continue;
      // The new shards that [ob, oe) overlaps.
      for (int j = static_cast<int>(ob / sn); j < new_world && j * sn < oe; ++j) {
        const std::int64_t b = std::max(ob, j * sn), e = std::min(oe, (j + 1) * sn);
        if (b < e) out.push_back({static_cast<int>(u), b, e, o, providers[o].new_rank, j});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const Piece& a, const Piece& b) {
    return std::tie(a.dst, a.src, a.unit, a.old_rank) < std::tie(b.dst, b.src, b.unit, b.old_rank);
  });
  return out;
}

void redistribute(dist::ProcessGroup& pg, const std::vector<std::int64_t>& unit_numel, int old_world,
                  const std::vector<Provider>& providers, const std::function<const float*(int, int)>& source,
                  float* const dst[3]) {
  const int me = pg.rank(), world = pg.world_size();
  const std::vector<Piece> pieces = plan_pieces(unit_numel, old_world, world, providers);
  const std::vector<std::int64_t> old_off = local_offsets(unit_numel, old_world);
  const std::vector<std::int64_t> new_off = local_offsets(unit_numel, world);
  const std::int64_t n_local = new_off.back();
  for (int k = 0; k < 3; ++k) std::fill(dst[k], dst[k] + n_local, 0.0f);
  // 1. Pieces that stay on this rank are copied straight into place (after a failure most do: a
  //    survivor keeps its own shard and holds the lost neighbour's replica).
  for (const Piece& p : pieces) {
    if (p.src != me || p.dst != me) continue;
    const std::int64_t so = shard_of(unit_numel[p.unit], old_world), sn = shard_of(unit_numel[p.unit], world);
    for (int k = 0; k < 3; ++k)
      std::copy_n(source(p.old_rank, k) + old_off[p.unit] + (p.begin - p.old_rank * so), p.end - p.begin,
                  dst[k] + new_off[p.unit] + (p.begin - static_cast<std::int64_t>(me) * sn));
  }
  // 2. Element counts to and from every other rank: three kinds of every piece.
  std::vector<std::int64_t> send(static_cast<std::size_t>(world), 0), recv(static_cast<std::size_t>(world), 0);
  for (const Piece& p : pieces) {
    if (p.src == p.dst) continue;
    if (p.src == me) send[static_cast<std::size_t>(p.dst)] += 3 * (p.end - p.begin);
    if (p.dst == me) recv[static_cast<std::size_t>(p.src)] += 3 * (p.end - p.begin);
  }
  std::int64_t total_send = 0, total_recv = 0;
  for (int r = 0; r < world; ++r) total_send += send[r], total_recv += recv[r];
  // 3. Pack: per destination, kind by kind, its pieces in plan order.
  Tensor in = Tensor::empty({total_send}, DType::f32), out = Tensor::empty({total_recv}, DType::f32);
  float* w = in.data<float>();
  auto dst_begin = pieces.begin();
  for (int j = 0; j < world; ++j) {
    const auto dst_end = std::find_if(dst_begin, pieces.end(), [&](const Piece& p) { return p.dst > j; });
    for (int k = 0; k < 3; ++k)
      for (auto it = dst_begin; it != dst_end; ++it) {
        if (it->src != me || it->dst == me) continue;
        const std::int64_t so = shard_of(unit_numel[it->unit], old_world);
        const float* from = source(it->old_rank, k);
        LMCORE_ASSERT(from != nullptr);
        w = std::copy_n(from + old_off[it->unit] + (it->begin - it->old_rank * so), it->end - it->begin, w);
      }
    dst_begin = dst_end;
  }
  LMCORE_ASSERT_EQ(w - in.data<float>(), total_send);
  // 4. One exchange.
  dist::AllToAllOptions a;
  a.input_split_sizes = send;
  a.output_split_sizes = recv;
  // (On a group of one nothing moves; all_to_all_single with split sizes crashes there: a dist bug.)
  if (world > 1) pg.all_to_all_single(out, in, a);
  // 5. Unpack: per source, kind by kind, the pieces for this rank in plan order (the sender's order).
  const float* r = out.data<float>();
  std::vector<const Piece*> mine;
  for (const Piece& p : pieces)
    if (p.dst == me && p.src != me) mine.push_back(&p);
  auto src_begin = mine.begin();
  for (int i = 0; i < world; ++i) {
    const auto src_end = std::find_if(src_begin, mine.end(), [&](const Piece* p) { return p->src > i; });
    for (int k = 0; k < 3; ++k)
      for (auto it = src_begin; it != src_end; ++it) {
        const Piece& p = **it;
        const std::int64_t sn = shard_of(unit_numel[p.unit], world);
        std::copy_n(r, p.end - p.begin, dst[k] + new_off[p.unit] + (p.begin - static_cast<std::int64_t>(me) * sn));
        r += p.end - p.begin;
      }
    src_begin = src_end;
  }
  LMCORE_ASSERT_EQ(r - out.data<float>(), total_recv);
}

}  // namespace lmcore::train::detail
