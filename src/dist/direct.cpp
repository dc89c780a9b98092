// The direct algorithms (see direct.h). Sends are staggered: rank r starts with rank r+1, so that
// not every rank starts with rank 0.
#include "src/dist/direct.h"

#include <memory>

namespace lmcore::dist::detail {

void DirectAllGather::run() {
  const int n = ctx_.size(), r = ctx_.rank();
  const auto mine = static_cast<std::size_t>(r);
  // 1. A receive for every peer's segment.
  for (int p = 0; p < n; ++p) {
    const auto i = static_cast<std::size_t>(p);
    if (p != r && seg_.len[i] > 0) buf_.recv(p, slot_, seg_.off[i], seg_.len[i]);
  }
  // 2. This rank's segment to every peer that agrees; only those send theirs.
  CallContext::Buffer& from = own_ != nullptr ? own_->src : buf_;
  const std::size_t from_off = own_ != nullptr ? 0 : seg_.off[mine];
  int recvs = 0, sends = 0;
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    if (gate_ != nullptr && !gate_->agrees(p)) continue;
    if (seg_.len[static_cast<std::size_t>(p)] > 0) ++recvs;
    if (seg_.len[mine] > 0) {
      from.send(p, slot_, from_off, seg_.len[mine]);
      ++sends;
    }
  }
  // 3. The own segment into place while it travels.
  if (own_ != nullptr) own_->place();
  // 4. Wait for the peers' segments and this rank's sends; then the gate's verdict.
  for (int i = 0; i < recvs; ++i) buf_.wait_recv();
  for (int i = 0; i < sends; ++i) from.wait_send();
  if (gate_ != nullptr) gate_->finish();
}

void DirectReduceScatter::run() {
  const int n = ctx_.size(), r = ctx_.rank();
  const std::size_t mine = seg_.len[static_cast<std::size_t>(r)];
  const std::size_t es = dtype_size(dtype_);
  // 1. Part p of the group's scratch receives rank p's contribution to this rank's segment.
  auto& scratch = ctx_.scratch().ring;
  const std::size_t parts_bytes = std::max<std::size_t>(mine * static_cast<std::size_t>(n), 1);
  if (scratch.size() < parts_bytes) scratch.resize(parts_bytes);
  std::byte* parts = scratch.data();
  {
    CallContext::Buffer recv_buf(ctx_, parts, parts_bytes);
    CallContext::Buffer send_buf(ctx_, src_, seg_.end());
    const std::uint64_t slot = ctx_.slot(Slot::data, step_);
    // A group that gives way to another (give_way.h) moves the data in pieces, one at a time; else
    // in one piece. Every rank cuts every segment alike, and Gloo keeps one pair's messages on one
    // slot in order, so piece j meets piece j.
    const GiveWay& way = ctx_.give_way();
    const int pieces = way.pieces(seg_.max_len(), n);
    for (int j = 0; j < pieces; ++j) {
      int recvs = 0, sends = 0;
      std::size_t o = 0, l = 0;
      for (int p = 0; p < n; ++p) {
        piece_of(static_cast<std::size_t>(p) * mine, mine, j, pieces, es, o, l);
        if (p != r && l > 0) {
          recv_buf.recv(p, slot, o, l);
          ++recvs;
        }
      }
      // 2. Piece j of segment p of `src` to rank p (once the groups this one gives way to are idle).
      if (way.active()) way.wait_clear(ctx_);
      for (int k = 1; k < n; ++k) {
        const int p = (r + k) % n;
        const auto i = static_cast<std::size_t>(p);
        piece_of(seg_.off[i], seg_.len[i], j, pieces, es, o, l);
        if (l > 0) {
          send_buf.send(p, slot, o, l);
          ++sends;
        }
      }
      // 3. Wait for all of it.
      for (int i = 0; i < recvs; ++i) recv_buf.wait_recv();
      for (int i = 0; i < sends; ++i) send_buf.wait_send();
    }
  }
  if (mine == 0) return;
  // 4. Fold the n contributions in rank order.
  std::memcpy(parts + static_cast<std::size_t>(r) * mine, src_ + seg_.off[static_cast<std::size_t>(r)], mine);
  const auto count = static_cast<std::int64_t>(mine / es);
  fold_in_rank_order(out_, n, [&](int p) { return parts + static_cast<std::size_t>(p) * mine; }, count, dtype_, op_);
}

void DirectAllToAll::run() {
  const OpDesc& op = ctx_.op();
  const int n = ctx_.size(), r = ctx_.rank();
  const std::size_t es = op.b.itemsize();
  // 1. Byte offsets of each rank's block in the input (to) and the output (from).
  std::vector<std::size_t> to_off(static_cast<std::size_t>(n) + 1, 0), from_off(static_cast<std::size_t>(n) + 1, 0);
  for (std::size_t p = 0; p < static_cast<std::size_t>(n); ++p) {
    to_off[p + 1] = to_off[p] + static_cast<std::size_t>(to_[p]) * es;
    from_off[p + 1] = from_off[p] + static_cast<std::size_t>(from_[p]) * es;
  }
  const auto me = static_cast<std::size_t>(r);
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
  auto* in = static_cast<std::byte*>(op.b.data_ptr());
  // 2. This rank's own block, locally.
  if (to_[me] > 0) std::memmove(out + from_off[me], in + to_off[me], static_cast<std::size_t>(to_[me]) * es);
  if (n == 1) return;
  // 3. A receive for every peer's block, then this rank's block for each peer; Gloo buffers need a
  //    non-empty range, so they exist only when something moves.
  std::unique_ptr<CallContext::Buffer> out_buf, in_buf;
  if (from_off[static_cast<std::size_t>(n)] > from_off[me + 1] - from_off[me]) {
    out_buf = std::make_unique<CallContext::Buffer>(ctx_, out, from_off[static_cast<std::size_t>(n)]);
  }
  if (to_off[static_cast<std::size_t>(n)] > to_off[me + 1] - to_off[me]) {
    in_buf = std::make_unique<CallContext::Buffer>(ctx_, in, to_off[static_cast<std::size_t>(n)]);
  }
  const std::uint64_t slot = ctx_.slot(Slot::data, 0);
  int recvs = 0, sends = 0;
  for (int p = 0; p < n; ++p) {
    const auto i = static_cast<std::size_t>(p);
    if (p != r && from_[i] > 0) {
      out_buf->recv(p, slot, from_off[i], from_off[i + 1] - from_off[i]);
      ++recvs;
    }
  }
  for (int k = 1; k < n; ++k) {
    const auto i = static_cast<std::size_t>((r + k) % n);
    if (to_[i] > 0) {
      in_buf->send(static_cast<int>(i), slot, to_off[i], to_off[i + 1] - to_off[i]);
      ++sends;
    }
  }
  // 4. Wait for all of it.
  for (int i = 0; i < recvs; ++i) out_buf->wait_recv();
  for (int i = 0; i < sends; ++i) in_buf->wait_send();
}

void DirectBroadcast::run() {
  const OpDesc& op = ctx_.op();
  const std::size_t nbytes = op.a.nbytes();
  if (ctx_.size() == 1 || nbytes == 0) return;
  CallContext::Buffer buf(ctx_, op.a.data_ptr(), nbytes);
  const std::uint64_t slot = ctx_.slot(Slot::data, 0);
  if (ctx_.rank() == op.peer) {
    // 1. The root sends to every peer, 2. and waits for the sends.
    for (int p = 0; p < ctx_.size(); ++p) {
      if (p != op.peer) buf.send(p, slot, 0, nbytes);
    }
    for (int p = 1; p < ctx_.size(); ++p) buf.wait_send();
  } else {
    // 1. The others receive from the root, 2. and wait for it.
    buf.recv(op.peer, slot, 0, nbytes);
    buf.wait_recv();
  }
}

}  // namespace lmcore::dist::detail
