// The ring algorithms (see ring.h).
#include "src/dist/ring.h"

#include <algorithm>
#include <stdexcept>

namespace lmcore::dist::detail {

namespace {

// Up to this many pieces of a ring are in flight at once.
constexpr int kRingInflight = 4;
constexpr std::size_t kMinRingPiece = 128 * 1024;

int ring_chunks(const CallContext& ctx, std::size_t max_len) {
  const std::size_t c = std::max<std::size_t>(ctx.config().ring_chunk_bytes, 1);
  // At least two pieces once a segment is large: a neighbour can then forward the first half
  // while the second is still arriving (Gloo's own ring allgather always halves its segments).
  const std::size_t at_least = max_len >= 2 * kMinRingPiece ? 2 : 1;
  return static_cast<int>(std::max<std::size_t>(at_least, (max_len + c - 1) / c));
}

// At most `chunks`: piece (k-1, j) must complete before piece (k, j), which forwards it, is posted.
int ring_inflight(int chunks) { return std::min(chunks, kRingInflight); }

}  // namespace

// ---- all-gather ----

RingAllGather::RingAllGather(CallContext& ctx, CallContext::Buffer& buf, const Segments& seg, std::size_t align,
                             std::uint32_t step, AllGatherGate* gate, OwnSegment* own)
    : buf_(buf), seg_(seg), align_(align), gate_(gate), own_(own), n_(ctx.size()), r_(ctx.rank()),
      right_((r_ + 1) % n_), left_((r_ + n_ - 1) % n_), slot_(ctx.slot(Slot::data, step)),
      chunks_(ring_chunks(ctx, seg.max_len())), recvs_of_step_(static_cast<std::size_t>(n_ - 1), 0) {}

void RingAllGather::run() {
  // 1. Post every receive up front: each piece has its own place in the buffer, so a peer never
  //    waits for this rank to post one.
  post_receives();
  // 2. Step 0: this rank's segment to the right neighbour, if it agrees.
  ok_ = agrees(right_);
  send_own_segment();
  // 3. Steps 1 .. n-2: forward each piece of the previous step as soon as it has arrived.
  forward();
  // 4. Wait for the rest and let the gate give its verdict; after a mismatch, first wait for
  //    exactly what the left neighbour still sends.
  if (!chain_agrees(n_ - 2)) drain_after_mismatch();
  for (; waited_ < recvs_; ++waited_) buf_.wait_recv();
  wait_sends();
  if (gate_ != nullptr) gate_->finish();
}

void RingAllGather::piece(int seg, int j, std::size_t& o, std::size_t& l) const {
  piece_of(seg_.off[static_cast<std::size_t>(seg)], seg_.len[static_cast<std::size_t>(seg)], j, chunks_, align_, o, l);
}

bool RingAllGather::chain_agrees(int k) {
  for (; ok_ && checked_ < k + 1; ++checked_) ok_ = agrees(before(checked_ + 1));
  return ok_;
}

void RingAllGather::post_receives() {
  for (int k = 0; k < n_ - 1; ++k) {
    for (int j = 0; j < chunks_; ++j) {
      std::size_t ro, rl;
      piece(before(k + 1), j, ro, rl);
      if (rl > 0) {
        buf_.recv(left_, slot_, ro, rl);
        ++recvs_of_step_[static_cast<std::size_t>(k)];
      }
    }
    recvs_ += recvs_of_step_[static_cast<std::size_t>(k)];
  }
}

void RingAllGather::send_own_segment() {
  CallContext::Buffer& from = own_ != nullptr ? own_->src : buf_;
  const std::size_t from_base = own_ != nullptr ? seg_.off[static_cast<std::size_t>(r_)] : 0;
  for (int j = 0; j < chunks_ && ok_; ++j) {
    std::size_t so, sl;
    piece(r_, j, so, sl);
    if (sl > 0) {
      from.send(right_, slot_, so - from_base, sl);
      ++own_sends_;
    }
  }
  if (own_ != nullptr) own_->place();
}

void RingAllGather::forward() {
  // Receives complete in the order they were posted (one slot, one sender, one stream).
  for (int k = 1; k < n_ - 1 && chain_agrees(k - 1); ++k) {
    for (int j = 0; j < chunks_; ++j) {
      std::size_t o, l;
      piece(before(k), j, o, l);  // received as piece j of step k-1, forwarded now
      if (l > 0) {
        buf_.wait_recv();
        ++waited_;
        buf_.send(right_, slot_, o, l);
        ++sends_;
      }
    }
  }
}

void RingAllGather::wait_sends() {
  CallContext::Buffer& from = own_ != nullptr ? own_->src : buf_;
  for (int i = 0; i < own_sends_; ++i) from.wait_send();
  for (int i = 0; i < sends_; ++i) buf_.wait_send();
  own_sends_ = sends_ = 0;
}

void RingAllGather::drain_after_mismatch() {
  // The left neighbour sends step 0 if it agrees with this rank, and step k if, in addition, ranks
  // r-2 ... r-k-1 agree with it (its own checks, the same as this rank's).
  int left_sends = 0;
  for (int k = 0; k < n_ - 1 && agrees(left_); ++k) {
    if (k > 0 && !agrees(before(k + 1))) break;
    left_sends += recvs_of_step_[static_cast<std::size_t>(k)];
  }
  for (; waited_ < left_sends; ++waited_) buf_.wait_recv();
  wait_sends();
  gate_->finish();  // throws: some rank disagrees
  throw std::logic_error("RingAllGather: ranks disagree but the header round found no mismatch");
}

// ---- reduce-scatter ----

RingReduceScatter::RingReduceScatter(CallContext& ctx, std::byte* src, std::byte* out, const Segments& seg, DType dtype,
                                     ReduceOp combine_op, std::uint32_t step)
    : ctx_(ctx), src_(src), out_(out), seg_(seg), dtype_(dtype), op_(combine_op), n_(ctx.size()), r_(ctx.rank()),
      right_((r_ + 1) % n_), left_((r_ + n_ - 1) % n_), es_(dtype_size(dtype)), slot_(ctx.slot(Slot::data, step)),
      chunks_(ring_chunks(ctx, seg.max_len())), window_(ring_inflight(chunks_)) {}

void RingReduceScatter::run() {
  // 1. Two receive buffers, by step parity: piece j of buffer k%2 is received at step k, reduced,
  //    sent at step k+1 and received into again at step k+2, after that send completed (the window
  //    is at most the piece count). Kept by the group between calls.
  const std::size_t max_len = seg_.max_len();
  auto& scratch = ctx_.scratch().ring;
  if (scratch.size() < 2 * max_len) scratch.resize(2 * max_len);
  tmp_mem_[0] = scratch.data();
  tmp_mem_[1] = scratch.data() + max_len;
  in_buf_.emplace(ctx_, src_, seg_.end());
  tmp0_.emplace(ctx_, tmp_mem_[0], max_len);
  tmp1_.emplace(ctx_, tmp_mem_[1], max_len);
  tmp_[0] = &*tmp0_;
  tmp_[1] = &*tmp1_;
  // 2. Post step k's piece j, k = 0 .. n-2, keeping at most `window` pieces in flight: completing
  //    the oldest reduces piece (k-1, j) before piece (k, j) forwards it.
  for (int i = 0; i < (n_ - 1) * chunks_; ++i) {
    if (static_cast<int>(inflight_.size()) == window_) complete_oldest();
    post(i / chunks_, i % chunks_);
  }
  // 3. Complete the rest; the last step's pieces land in `out`.
  while (!inflight_.empty()) complete_oldest();
}

void RingReduceScatter::post(int k, int j) {
  const int s_seg = ((r_ - k - 1) % n_ + n_) % n_, r_seg = ((r_ - k - 2) % n_ + n_) % n_;
  const auto s = static_cast<std::size_t>(s_seg), rs = static_cast<std::size_t>(r_seg);
  std::size_t so, sl, ro, rl;
  piece_of(seg_.off[s], seg_.len[s], j, chunks_, es_, so, sl);
  piece_of(seg_.off[rs], seg_.len[rs], j, chunks_, es_, ro, rl);
  // Step 0 sends this rank's own contribution; later steps what the step before received and reduced.
  CallContext::Buffer* send_buf = k == 0 ? &*in_buf_ : tmp_[(k - 1) % 2];
  const std::size_t send_off = k == 0 ? so : so - seg_.off[s];
  if (rl > 0) tmp_[k % 2]->recv(left_, slot_, ro - seg_.off[rs], rl);
  if (sl > 0) send_buf->send(right_, slot_, send_off, sl);
  inflight_.push_back({k, send_buf, sl > 0, rl > 0, ro, rl, r_seg});
}

void RingReduceScatter::complete_oldest() {
  const Posted p = inflight_.front();
  inflight_.pop_front();
  if (p.recvd) tmp_[p.k % 2]->wait_recv();
  if (p.sent) p.send_buf->wait_send();
  if (p.rlen == 0) return;
  // The received partial sum of this piece, plus this rank's own contribution to it.
  const std::size_t rel = p.roff - seg_.off[static_cast<std::size_t>(p.r_seg)];
  std::byte* received = tmp_mem_[p.k % 2] + rel;
  std::byte* dst = (p.k == n_ - 2) ? out_ + rel : received;
  combine(dst, received, src_ + p.roff, static_cast<std::int64_t>(p.rlen / es_), dtype_, op_);
}

}  // namespace lmcore::dist::detail
