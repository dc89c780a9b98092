// Private: the header round, the first message of every call.
//
// Every rank sends every peer (for send/recv: the one peer) a fixed-size Header describing its call;
// comparing them catches mismatched calls before any payload is used, on every rank alike. Up to
// inline_limit(n) bytes per peer, the payload itself travels in the same message, right after the
// header, when the call would take a one-round direct path anyway: a small collective then costs
// one latency, as in Gloo, instead of a header round followed by a payload round.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "src/dist/algorithm.h"

namespace lmcore::dist::detail {

struct Header {
  std::uint32_t magic = 0x4c4d4344;  // "LMCD"
  std::uint32_t generation = 0;
  std::int64_t seq = 0;
  std::uint8_t op = 0;
  std::uint8_t dtype_in = 0;
  std::uint8_t dtype_out = 0;
  std::uint8_t rop = 0;
  std::int32_t root = -1;
  std::int64_t count_in = 0;   // elements
  std::int64_t count_out = 0;
  // The algorithm options: ranks that cut the data differently would not match up.
  std::uint64_t direct_max_bytes = 0;
  std::uint64_t ring_chunk_bytes = 0;
  std::uint64_t give_way_bytes = 0;  // ProcessGroup::give_way_to's piece size (0: none): cuts the data
  std::uint8_t uneven_splits = 0;  // all_to_all_single with split sizes: a second round checks them
  std::uint32_t inline_bytes = 0;  // payload bytes that follow this header in the same message
  char local_error[96] = {};   // non-empty: this rank's arguments are invalid (reason)
};

// This rank's header for the call, with local_error set when its arguments are invalid.
Header make_header(const CallContext& ctx);

// all_to_all_single's elements to (input) or from (output) each rank: the split sizes times the
// elements per row, or equal blocks. Assumes make_header found the arguments valid.
std::vector<std::int64_t> all_to_all_split_elements(const OpDesc& op, int world_size, bool input);

// Whether the payload rides with the headers, and how much of it goes to each peer.
struct InlinePlan {
  bool on = false;            // the payload rides with the headers
  bool same_for_all = true;   // every peer gets the same share (else share p goes to peer p)
  std::size_t bytes = 0;      // one share
};

// The round, in two halves so that all_gather can overlap it with its first data step: the
// constructor posts every send and receive, agrees(p) waits for one peer's header, finish() for all
// of them, and throws the mismatch error (the same on every rank) if any two disagree. run() is
// both halves back to back.
class HeaderRound final : public AllGatherGate {
 public:
  HeaderRound(CallContext& ctx, const Header& header);
  static void run(CallContext& ctx, const Header& header) { HeaderRound(ctx, header).finish(); }

  const InlinePlan& plan() const { return plan_; }
  // Whether peer p called the same thing as this rank (waits for its header). A rank that sends
  // data before finish() sends only to peers that agree, which have posted receives of that size.
  bool agrees(int p) override;
  void finish() override;

 private:
  void wait_for(int p);
  void verdict();

  CallContext& ctx_;
  const OpDesc& op_;
  const int n_, r_;
  const InlinePlan plan_;
  Header mine_;
  std::vector<Header> all_;
  std::vector<bool> have_;
  std::vector<int> peers_;
  std::size_t out_len_ = 0, in_stride_ = 0;
  std::vector<std::byte> p2p_out_, p2p_in_;
  std::vector<std::byte>*out_mem_ = nullptr, *in_mem_ = nullptr;
  std::vector<std::unique_ptr<CallContext::Buffer>> in_bufs_;
  std::optional<CallContext::Buffer> out_buf_;
};

}  // namespace lmcore::dist::detail
