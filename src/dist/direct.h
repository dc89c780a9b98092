// Private: the direct algorithms. Each block goes straight to the rank that needs it: one latency
// instead of the ring's n-1, for the same bytes per rank (all-gather, reduce-scatter, all-to-all) or
// n-1 times them at the root (broadcast). Chosen up to GroupConfig::direct_max_bytes.
#pragma once

#include "src/dist/algorithm.h"

namespace lmcore::dist::detail {

// All-gather over `buf` (segment p is rank p's) on `slot`: this rank's segment goes to every peer.
// With a gate, the segment goes to each peer that agrees, and the data of every agreeing peer is in
// before the gate's verdict is taken (a disagreeing peer sends nothing to this rank, nor this rank
// to it). With `own`, the segment leaves from the input and is copied into place while it travels.
class DirectAllGather {
 public:
  DirectAllGather(CallContext& ctx, CallContext::Buffer& buf, const Segments& seg, std::uint64_t slot,
                  AllGatherGate* gate = nullptr, OwnSegment* own = nullptr)
      : ctx_(ctx), buf_(buf), seg_(seg), slot_(slot), gate_(gate), own_(own) {}
  void run();

 private:
  CallContext& ctx_;
  CallContext::Buffer& buf_;
  const Segments& seg_;
  const std::uint64_t slot_;
  AllGatherGate* const gate_;
  OwnSegment* const own_;
};

// Reduce-scatter (segments as in RingReduceScatter): segment p of `src` goes to rank p, which folds
// the n contributions in rank order into `out` (the same bits on every rank). In a group that gives
// way to another (ProcessGroup::give_way_to), in pieces, each sent once the other group is idle.
class DirectReduceScatter {
 public:
  DirectReduceScatter(CallContext& ctx, std::byte* src, std::byte* out, const Segments& seg, DType dtype,
                      ReduceOp combine_op, std::uint32_t step)
      : ctx_(ctx), src_(src), out_(out), seg_(seg), dtype_(dtype), op_(combine_op), step_(step) {}
  void run();

 private:
  CallContext& ctx_;
  std::byte* const src_;
  std::byte* const out_;
  const Segments& seg_;
  const DType dtype_;
  const ReduceOp op_;
  const std::uint32_t step_;
};

// all_to_all_single: `to` (elements) of the input go to each rank in order, `from` come from each.
class DirectAllToAll {
 public:
  DirectAllToAll(CallContext& ctx, const std::vector<std::int64_t>& to, const std::vector<std::int64_t>& from)
      : ctx_(ctx), to_(to), from_(from) {}
  void run();

 private:
  CallContext& ctx_;
  const std::vector<std::int64_t>& to_;
  const std::vector<std::int64_t>& from_;
};

// broadcast: the root sends its whole tensor to every peer.
class DirectBroadcast {
 public:
  explicit DirectBroadcast(CallContext& ctx) : ctx_(ctx) {}
  void run();

 private:
  CallContext& ctx_;
};

}  // namespace lmcore::dist::detail
