// The collectives: for each, the path its size takes through the algorithms.
//
//   the payload came with the headers   fold or copy the shares (header_round.cpp)
//   up to direct_max_bytes              the direct algorithms (direct.cpp)
//   above                               the rings (ring.cpp)
//
// Every call except all_gather has run its header round before it gets here; all_gather overlaps
// its own with its data.
#include "src/dist/collectives.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "src/dist/direct.h"
#include "src/dist/header_round.h"
#include "src/dist/ring.h"

namespace lmcore::dist::detail {

Segments Segments::even(std::int64_t count, int n, std::size_t elsize) {
  Segments s;
  s.off.resize(static_cast<std::size_t>(n));
  s.len.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::int64_t a = count * i / n, b = count * (i + 1) / n;
    s.off[static_cast<std::size_t>(i)] = static_cast<std::size_t>(a) * elsize;
    s.len[static_cast<std::size_t>(i)] = static_cast<std::size_t>(b - a) * elsize;
  }
  return s;
}

std::size_t Segments::max_len() const { return len.empty() ? 0 : *std::max_element(len.begin(), len.end()); }

std::size_t Segments::end() const {
  std::size_t e = 0;
  for (std::size_t i = 0; i < off.size(); ++i) e = std::max(e, off[i] + len[i]);
  return e;
}

void piece_of(std::size_t off, std::size_t len, int j, int chunks, std::size_t align, std::size_t& o, std::size_t& l) {
  const std::size_t units = len / align;
  const std::size_t a = units * static_cast<std::size_t>(j) / static_cast<std::size_t>(chunks);
  const std::size_t b = units * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(chunks);
  o = off + a * align;
  l = (j + 1 == chunks ? len - a * align : (b - a) * align);
}

namespace {
std::size_t direct_bytes(const CallContext& ctx) { return ctx.config().direct_max_bytes; }
}  // namespace

void run_all_reduce(CallContext& ctx) {
  const OpDesc& op = ctx.op();
  Tensor t = op.a;
  const DType dt = t.dtype();
  const std::int64_t count = t.numel();
  const int n = ctx.size(), r = ctx.rank();
  auto* data = static_cast<std::byte*>(t.data_ptr());
  const ReduceOp cop = combine_op_of(op.rop);
  if (ctx.payload_arrived()) {
    // Every rank's (premultiplied) buffer came with the headers: fold them in rank order.
    if (count > 0) fold_in_rank_order(data, n, [&](int p) { return ctx.share_from(p); }, count, dt, cop);
    if (op.rop == ReduceOp::avg) finish_avg(data, count, dt, n);
    return;
  }
  if (op.rop == ReduceOp::premul_sum) premultiply(data, data, count, dt, op.factor);
  const std::size_t nbytes = t.nbytes();
  if (n == 1 || count == 0) {
    // nothing to exchange
  } else if (nbytes <= std::min(kDirectAllReduceBytes, direct_bytes(ctx)) || count < n) {
    // Every rank receives every buffer and folds them in rank order (the same bits everywhere).
    std::vector<std::byte> all(nbytes * static_cast<std::size_t>(n));
    std::memcpy(all.data() + static_cast<std::size_t>(r) * nbytes, data, nbytes);
    {
      CallContext::Buffer buf(ctx, all.data(), all.size());
      DirectAllGather(ctx, buf, Segments::even(n, n, nbytes), ctx.slot(Slot::data, 0)).run();
    }
    fold_in_rank_order(data, n, [&](int p) { return all.data() + static_cast<std::size_t>(p) * nbytes; }, count, dt, cop);
  } else {
    // A reduce-scatter, then an all-gather of the reduced segments: 2(n-1)/n of the data.
    const Segments seg = Segments::even(count, n, dtype_size(dt));
    const auto mine = static_cast<std::size_t>(r);
    const bool direct = nbytes <= direct_bytes(ctx);
    if (direct) {
      DirectReduceScatter(ctx, data, data + seg.off[mine], seg, dt, cop, 0).run();
    } else {
      RingReduceScatter(ctx, data, data + seg.off[mine], seg, dt, cop, 0).run();
    }
    if (op.rop == ReduceOp::avg) {
      finish_avg(data + seg.off[mine], static_cast<std::int64_t>(seg.len[mine] / dtype_size(dt)), dt, n);
    }
    CallContext::Buffer buf(ctx, data, nbytes);
    if (direct) {
      DirectAllGather(ctx, buf, seg, ctx.slot(Slot::data, 1)).run();
    } else {
      RingAllGather(ctx, buf, seg, dtype_size(dt), 1).run();
    }
    return;
  }
  if (op.rop == ReduceOp::avg) finish_avg(data, count, dt, n);
}

void run_broadcast(CallContext& ctx) {
  const OpDesc& op = ctx.op();
  const std::size_t nbytes = op.a.nbytes();
  if (ctx.size() == 1 || nbytes == 0) return;
  if (ctx.payload_arrived()) {
    if (ctx.rank() != op.peer) std::memcpy(op.a.data_ptr(), ctx.share_from(op.peer), nbytes);
    return;
  }
  DirectBroadcast(ctx).run();
}

void run_all_gather(CallContext& ctx, const Header& header) {
  const OpDesc& op = ctx.op();
  const int n = ctx.size(), r = ctx.rank();
  HeaderRound round(ctx, header);
  const std::size_t nb = op.b.nbytes();
  if (n == 1 || nb == 0 || round.plan().on || header.local_error[0] != '\0') {
    round.finish();  // the data travelled with the headers, or there is none (or an error to report)
  }
  if (nb == 0) return;
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
  auto* in = static_cast<std::byte*>(op.b.data_ptr());
  std::byte* own_dst = out + static_cast<std::size_t>(r) * nb;
  const std::size_t out_bytes = nb * static_cast<std::size_t>(n);
  // An input apart from the output leaves straight from where it is (see OwnSegment); one that
  // overlaps the output is copied first, as receives may land on it.
  const bool apart = in + nb <= out || out + out_bytes <= in;
  if ((n == 1 || ctx.payload_arrived() || !apart) && own_dst != in) std::memmove(own_dst, in, nb);
  if (n == 1) return;
  if (ctx.payload_arrived()) {
    for (int p = 0; p < n; ++p) {
      if (p != r) std::memcpy(out + static_cast<std::size_t>(p) * nb, ctx.share_from(p), nb);
    }
    return;
  }
  // The data starts moving while the headers are still arriving: a separate header round first
  // would synchronise every rank before every call, which raw Gloo does not do.
  CallContext::Buffer buf(ctx, out, out_bytes);
  std::optional<CallContext::Buffer> in_buf;
  std::optional<OwnSegment> own;
  if (apart) own.emplace(OwnSegment{in_buf.emplace(ctx, in, nb), own_dst, nb});
  OwnSegment* own_ptr = own ? &*own : nullptr;
  const Segments seg = Segments::even(n, n, nb);  // one input per rank
  if (out_bytes <= direct_bytes(ctx)) {
    DirectAllGather(ctx, buf, seg, ctx.slot(Slot::data, 0), &round, own_ptr).run();
  } else {
    RingAllGather(ctx, buf, seg, op.b.itemsize(), 0, &round, own_ptr).run();
  }
}

void run_reduce_scatter(CallContext& ctx) {
  const OpDesc& op = ctx.op();
  const int n = ctx.size();
  const DType dt = op.a.dtype();
  const std::int64_t m = op.a.numel();
  if (m == 0) return;
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
  const ReduceOp cop = combine_op_of(op.rop);
  if (ctx.payload_arrived()) {
    // Every rank's (premultiplied) contribution to this rank's segment came with the headers.
    fold_in_rank_order(out, n, [&](int p) { return ctx.share_from(p); }, m, dt, cop);
    if (op.rop == ReduceOp::avg) finish_avg(out, m, dt, n);
    return;
  }
  auto* src = static_cast<std::byte*>(op.b.data_ptr());
  Tensor scaled;
  if (op.rop == ReduceOp::premul_sum) {
    scaled = Tensor::empty({op.b.numel()}, dt);  // the input is const: scale a copy
    premultiply(scaled.data_ptr(), src, op.b.numel(), dt, op.factor);
    src = static_cast<std::byte*>(scaled.data_ptr());
  }
  const std::size_t nb = op.a.nbytes();
  if (n == 1) {
    std::memmove(out, src, nb);
  } else {
    const Segments seg = Segments::even(n, n, nb);  // one output per rank
    if (nb * static_cast<std::size_t>(n) <= direct_bytes(ctx)) {
      DirectReduceScatter(ctx, src, out, seg, dt, cop, 0).run();
    } else {
      RingReduceScatter(ctx, src, out, seg, dt, cop, 0).run();
    }
  }
  if (op.rop == ReduceOp::avg) finish_avg(out, m, dt, n);
}

void run_all_to_all(CallContext& ctx) {
  const OpDesc& op = ctx.op();
  const int n = ctx.size(), r = ctx.rank();
  const auto to = all_to_all_split_elements(op, n, true), from = all_to_all_split_elements(op, n, false);
  if (ctx.payload_arrived()) {
    // This rank's own block locally, each peer's from its share.
    const std::size_t es = op.b.itemsize();
    std::size_t to_off = 0, from_off = 0;
    for (int p = 0; p < r; ++p) {
      to_off += static_cast<std::size_t>(to[static_cast<std::size_t>(p)]) * es;
    }
    auto* out = static_cast<std::byte*>(op.a.data_ptr());
    const auto* in = static_cast<const std::byte*>(op.b.data_ptr());
    for (int p = 0; p < n; ++p) {
      const std::size_t bytes = static_cast<std::size_t>(from[static_cast<std::size_t>(p)]) * es;
      if (bytes > 0) std::memmove(out + from_off, p == r ? in + to_off : ctx.share_from(p), bytes);
      from_off += bytes;
    }
    return;
  }
  DirectAllToAll(ctx, to, from).run();
}

void run_send(CallContext& ctx) {
  const OpDesc& op = ctx.op();
  if (op.a.nbytes() == 0) return;
  CallContext::Buffer buf(ctx, op.a.data_ptr(), op.a.nbytes());
  buf.send(op.peer, ctx.slot(Slot::p2p_data), 0, op.a.nbytes());
  buf.wait_send();
}

void run_recv(CallContext& ctx) {
  const OpDesc& op = ctx.op();
  if (op.a.nbytes() == 0) return;
  CallContext::Buffer buf(ctx, op.a.data_ptr(), op.a.nbytes());
  buf.recv(op.peer, ctx.slot(Slot::p2p_data), 0, op.a.nbytes());
  buf.wait_recv();
}

}  // namespace lmcore::dist::detail
