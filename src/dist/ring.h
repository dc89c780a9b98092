// Private: the ring algorithms. Rank r sends to r+1 and receives from r-1; each segment is cut into
// pieces of about GroupConfig::ring_chunk_bytes, and a piece is forwarded as soon as it has arrived
// (and been reduced), rather than a whole segment per step, which kept a rank idle while its left
// neighbour worked through its segment. Every rank derives the same cuts from the same sizes and
// options. Each rank moves (n-1)/n of the buffer, in n-1 steps.
#pragma once

#include <deque>
#include <optional>

#include "src/dist/algorithm.h"

namespace lmcore::dist::detail {

// All-gather over `buf`, whose segment r (this rank's) is already in place, or leaves from `own`.
// Step k sends segment r-k and receives segment r-k-1.
//
// With a gate no rank waits for every header first. A rank sends only if its right neighbour agrees
// with it, and before it waits for the data of step k it checks the headers of the k+1 ranks that
// data passed through (r-1 ... r-k-1): those ranks have started the call, or the data could not come,
// so the check costs no extra wait. If they all agree, each of them passed the same checks on its
// part of the way and the data does come. If one disagrees, this rank stops, and waits for exactly
// what its left neighbour still sends (that follows from the headers), so nothing is left half-sent
// before the gate throws the mismatch error.
class RingAllGather {
 public:
  RingAllGather(CallContext& ctx, CallContext::Buffer& buf, const Segments& seg, std::size_t align, std::uint32_t step,
                AllGatherGate* gate = nullptr, OwnSegment* own = nullptr);
  void run();

 private:
  int before(int d) const { return ((r_ - d) % n_ + n_) % n_; }  // the rank (and segment) d places left
  void piece(int seg, int j, std::size_t& o, std::size_t& l) const;
  bool agrees(int p) { return gate_ == nullptr || gate_->agrees(p); }
  bool chain_agrees(int k);  // the ranks step k's data passed through all agree
  void post_receives();
  void send_own_segment();
  void forward();
  void wait_sends();
  void drain_after_mismatch();

  CallContext::Buffer& buf_;
  const Segments& seg_;
  const std::size_t align_;
  AllGatherGate* const gate_;
  OwnSegment* const own_;
  const int n_, r_, right_, left_;
  const std::uint64_t slot_;
  const int chunks_;
  std::vector<int> recvs_of_step_;  // empty pieces are not posted
  int recvs_ = 0, sends_ = 0, own_sends_ = 0, waited_ = 0;
  int checked_ = 0;  // ranks r-1 ... r-checked_ agree
  bool ok_ = true;
};

// Reduce-scatter: segment s of `src` is this rank's contribution to segment s; afterwards `out`
// holds the reduction over all ranks of segment r (`out` may lie inside `src`'s segment r). Step k
// sends the partial sum of segment r-k-1 and receives that of segment r-k-2, adds this rank's own
// contribution in place, and forwards it at step k+1; the last step adds into `out`.
class RingReduceScatter {
 public:
  RingReduceScatter(CallContext& ctx, std::byte* src, std::byte* out, const Segments& seg, DType dtype,
                    ReduceOp combine_op, std::uint32_t step);
  void run();

 private:
  struct Posted {
    int k;
    CallContext::Buffer* send_buf;
    bool sent, recvd;
    std::size_t roff, rlen;
    int r_seg;
  };
  void post(int k, int j);
  void complete_oldest();

  CallContext& ctx_;
  std::byte* const src_;
  std::byte* const out_;
  const Segments& seg_;
  const DType dtype_;
  const ReduceOp op_;
  const int n_, r_, right_, left_;
  const std::size_t es_;
  const std::uint64_t slot_;
  const int chunks_, window_;
  std::byte* tmp_mem_[2] = {nullptr, nullptr};
  std::optional<CallContext::Buffer> in_buf_, tmp0_, tmp1_;
  CallContext::Buffer* tmp_[2] = {nullptr, nullptr};
  std::deque<Posted> inflight_;
};

}  // namespace lmcore::dist::detail
