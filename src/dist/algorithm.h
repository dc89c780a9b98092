// Private: what the algorithms share — how a buffer is cut into segments and pieces, the gate that
// lets an all-gather start before its header round ends, and the rank-ordered fold.
//
// The algorithms, one file each, every one a class whose run() is a short list of numbered steps:
//   header_round.cpp  the first message of every call: headers (+ a small payload) to every peer
//   direct.cpp        each block straight to the rank that needs it: one latency
//   ring.cpp          rings to the right neighbour, pipelined in pieces: (n-1)/n of the data per rank
// collectives.cpp picks among them for each collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lmcore/core/dtype.h"
#include "src/dist/context.h"
#include "src/dist/reduce.h"

namespace lmcore::dist::detail {

// Up to this many bytes (and direct_max_bytes) all_reduce sends every rank's whole buffer to every
// peer and folds in rank order: one latency instead of two, for (n-1) times the bytes.
constexpr std::size_t kDirectAllReduceBytes = 64 * 1024;

// Segment i of a buffer is [off[i], off[i] + len[i]) bytes; one per rank.
struct Segments {
  std::vector<std::size_t> off, len;
  // [0, count) elements in n nearly equal segments: segment i = [i*count/n, (i+1)*count/n).
  static Segments even(std::int64_t count, int n, std::size_t elsize);
  std::size_t max_len() const;
  std::size_t end() const;  // the largest off + len
};

// Piece j of `chunks` of the byte range [off, off + len), cut at multiples of `align`.
void piece_of(std::size_t off, std::size_t len, int j, int chunks, std::size_t align, std::size_t& o, std::size_t& l);

// What lets an all-gather start moving data before the header round has finished (HeaderRound):
// data goes only to a peer whose header agrees with this rank's (so its receives are posted for
// exactly that data), and finish() gives the verdict of the whole round, throwing on a mismatch.
class AllGatherGate {
 public:
  virtual bool agrees(int peer) = 0;
  virtual void finish() = 0;

 protected:
  ~AllGatherGate() = default;
};

// Where an all-gather sends this rank's own segment from, when its input lies apart from the
// output: `src` is a buffer over the input, and place() copies the input to `dst`, its block in the
// output. The copy then runs while the segment is already on its way, instead of before it leaves.
struct OwnSegment {
  CallContext::Buffer& src;
  std::byte* dst;
  std::size_t bytes;
  void place() const { std::memcpy(dst, src.data(), bytes); }
};

// out = part(0) (op) part(1) (op) ... (op) part(n-1), folded in rank order, so that every rank gets the
// same bits; n >= 2. `out` may be one of the parts.
template <typename PartOf>
void fold_in_rank_order(void* out, int n, PartOf&& part, std::int64_t count, DType dtype, ReduceOp op) {
  combine(out, part(0), part(1), count, dtype, op);
  for (int p = 2; p < n; ++p) combine(out, out, part(p), count, dtype, op);
}

// The op that combines two partial results: avg and premul_sum add (avg divides once at the end,
// premul_sum scales each rank's input first).
inline ReduceOp combine_op_of(ReduceOp op) {
  return (op == ReduceOp::avg || op == ReduceOp::premul_sum) ? ReduceOp::sum : op;
}

}  // namespace lmcore::dist::detail
