// The collective algorithms, each over Gloo's unbound buffers with lmcore's own bounded waits.
//
// Rings send to rank+1 and receive from rank-1. Each segment is cut in two halves and two operations
// are kept in flight, so a half's transfer overlaps the wait for (or the reduction of) the previous
// half. Every payload call is preceded by exchange_headers (a barrier in itself), which checks that
// all ranks called the same thing.
#include <cstring>
#include <deque>

#include "src/dist/group_impl.h"
#include "src/dist/reduce.h"

namespace lmcore::dist::detail {

namespace {

constexpr std::uint64_t kHeaderSlot = 1;
// Below this many bytes all_reduce sends every rank's whole buffer to every peer and folds in rank
// order: one latency instead of 2(n-1).
constexpr std::size_t kDirectAllReduceBytes = 64 * 1024;

std::string header_text(const Header& h) {
  std::string s = fmt::format("{} {}", op_kind_name(static_cast<OpKind>(h.op)), dtype_name(static_cast<DType>(h.dtype_in)));
  const auto kind = static_cast<OpKind>(h.op);
  if (kind == OpKind::all_reduce || kind == OpKind::reduce_scatter) {
    s += fmt::format(" op={}", reduce_op_name(static_cast<ReduceOp>(h.rop)));
  }
  if (kind == OpKind::broadcast) s += fmt::format(" root={}", h.root);
  s += fmt::format(" in={} out={} elements (seq {}, generation {})", h.count_in, h.count_out, h.seq, h.generation);
  if (h.local_error[0] != '\0') s += fmt::format(" invalid here: {}", std::string(h.local_error, strnlen(h.local_error, sizeof(h.local_error))));
  return s;
}

bool same_call(const Header& a, const Header& b) {
  return a.generation == b.generation && a.seq == b.seq && a.op == b.op && a.dtype_in == b.dtype_in &&
         a.dtype_out == b.dtype_out && a.rop == b.rop && a.root == b.root && a.count_in == b.count_in &&
         a.count_out == b.count_out;
}

// Split [0, count) into n nearly equal segments: segment i = [i*count/n, (i+1)*count/n).
void split_even(std::int64_t count, int n, std::size_t elsize, std::vector<std::size_t>& off, std::vector<std::size_t>& len) {
  off.resize(n);
  len.resize(n);
  for (int i = 0; i < n; ++i) {
    const std::int64_t a = count * i / n, b = count * (i + 1) / n;
    off[i] = static_cast<std::size_t>(a) * elsize;
    len[i] = static_cast<std::size_t>(b - a) * elsize;
  }
}

// Half h (0 or 1) of a byte range of `len` bytes starting at `off`; aligned to `align` bytes.
void half_of(std::size_t off, std::size_t len, int h, std::size_t align, std::size_t& o, std::size_t& l) {
  const std::size_t first = (len / align / 2) * align;
  o = h == 0 ? off : off + first;
  l = h == 0 ? first : len - first;
}

// Ring all-gather over `buf` whose segment i is [off[i], off[i]+len[i]) and this rank's segment is
// already in place. Step k sends segment (r-k) and receives segment (r-k-1).
void ring_all_gather(Exec& ex, Exec::Buffer& buf, const std::vector<std::size_t>& off,
                     const std::vector<std::size_t>& len, std::size_t align, std::uint32_t step) {
  const int n = ex.size(), r = ex.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const std::uint64_t slot = ex.data_slot(step);
  struct Posted { bool send, recv; };
  std::deque<Posted> inflight;
  auto complete_oldest = [&] {
    const Posted p = inflight.front();
    inflight.pop_front();
    if (p.recv) buf.wait_recv();
    if (p.send) buf.wait_send();
  };
  for (int i = 0; i < 2 * (n - 1); ++i) {
    const int k = i / 2, h = i % 2;
    // The half sent now was received two operations ago: wait for it before forwarding.
    if (inflight.size() == 2) complete_oldest();
    const int s_seg = ((r - k) % n + n) % n, r_seg = ((r - k - 1) % n + n) % n;
    std::size_t so, sl, ro, rl;
    half_of(off[s_seg], len[s_seg], h, align, so, sl);
    half_of(off[r_seg], len[r_seg], h, align, ro, rl);
    if (rl > 0) buf.recv(left, slot, ro, rl);
    if (sl > 0) buf.send(right, slot, so, sl);
    inflight.push_back({sl > 0, rl > 0});
  }
  while (!inflight.empty()) complete_oldest();
}

// Ring reduce-scatter: segment s of `src` is this rank's contribution to segment s; afterwards
// `out` holds the reduction over all ranks of segment r. Step k sends the partial sum of segment
// (r-k-1) and receives the partial sum of segment (r-k-2), adding this rank's own contribution.
// Each rank moves (n-1)/n of the buffer.
void ring_reduce_scatter(Exec& ex, std::byte* src, std::byte* out, const std::vector<std::size_t>& off,
                         const std::vector<std::size_t>& len, DType dtype, ReduceOp combine_op, std::uint32_t step) {
  const int n = ex.size(), r = ex.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const std::size_t es = dtype_size(dtype);
  std::size_t max_len = 0, total = 0;
  for (int i = 0; i < n; ++i) {
    max_len = std::max(max_len, len[i]);
    total = std::max(total, off[i] + len[i]);
  }
  // Two receive buffers and two partial-sum buffers, alternating by step parity. Declared before the
  // Gloo buffers so that those are destroyed (and deregistered) first.
  std::unique_ptr<std::byte[]> scratch(new std::byte[4 * max_len + 1]);  // uninitialised: all written first
  std::byte* tmp_mem[2] = {scratch.get(), scratch.get() + max_len};
  std::byte* acc_mem[2] = {scratch.get() + 2 * max_len, scratch.get() + 3 * max_len};
  Exec::Buffer in_buf(ex, src, total);
  Exec::Buffer tmp0(ex, tmp_mem[0], max_len), tmp1(ex, tmp_mem[1], max_len);
  Exec::Buffer acc0(ex, acc_mem[0], max_len), acc1(ex, acc_mem[1], max_len);
  Exec::Buffer* tmp[2] = {&tmp0, &tmp1};
  Exec::Buffer* acc[2] = {&acc0, &acc1};
  const std::uint64_t slot = ex.data_slot(step);

  struct Posted { int k, h; Exec::Buffer* send_buf; bool sent, recvd; std::size_t roff, rlen; int r_seg; };
  std::deque<Posted> inflight;
  auto complete_oldest = [&] {
    const Posted p = inflight.front();
    inflight.pop_front();
    if (p.recvd) tmp[p.k % 2]->wait_recv();
    if (p.sent) p.send_buf->wait_send();
    if (p.rlen == 0) return;
    // The received partial sum of this half, plus this rank's own contribution to it.
    const std::size_t rel = p.roff - off[p.r_seg];
    std::byte* dst = (p.k == n - 2) ? out + rel : acc_mem[p.k % 2] + rel;
    combine(dst, tmp_mem[p.k % 2] + rel, src + p.roff, static_cast<std::int64_t>(p.rlen / es), dtype, combine_op);
  };
  for (int i = 0; i < 2 * (n - 1); ++i) {
    const int k = i / 2, h = i % 2;
    if (inflight.size() == 2) complete_oldest();  // fills acc[(k-1)%2] half h, sent just below
    const int s_seg = ((r - k - 1) % n + n) % n, r_seg = ((r - k - 2) % n + n) % n;
    std::size_t so, sl, ro, rl;
    half_of(off[s_seg], len[s_seg], h, es, so, sl);
    half_of(off[r_seg], len[r_seg], h, es, ro, rl);
    Exec::Buffer* send_buf = k == 0 ? &in_buf : acc[(k - 1) % 2];
    const std::size_t send_off = k == 0 ? so : so - off[s_seg];
    if (rl > 0) tmp[k % 2]->recv(left, slot, ro - off[r_seg], rl);
    if (sl > 0) send_buf->send(right, slot, send_off, sl);
    inflight.push_back({k, h, send_buf, sl > 0, rl > 0, ro, rl, r_seg});
  }
  while (!inflight.empty()) complete_oldest();
}

ReduceOp combine_op_of(ReduceOp op) {
  return (op == ReduceOp::avg || op == ReduceOp::premul_sum) ? ReduceOp::sum : op;
}

}  // namespace

// ---- Exec ----

Exec::Buffer::Buffer(Exec& ex, void* ptr, std::size_t n) : ex_(ex) {
  buf_ = ex.g_.context->createUnboundBuffer(ptr, n);
  std::lock_guard<std::mutex> lock(ex.g_.active_mu);
  ex.g_.active.push_back(buf_.get());
}

Exec::Buffer::~Buffer() {
  std::lock_guard<std::mutex> lock(ex_.g_.active_mu);
  auto& v = ex_.g_.active;
  v.erase(std::remove(v.begin(), v.end(), buf_.get()), v.end());
}

void Exec::Buffer::send(int dst, std::uint64_t slot, std::size_t offset, std::size_t nbytes) {
  ex_.check_abort();
  buf_->send(dst, slot, offset, nbytes);
}
void Exec::Buffer::recv(int src, std::uint64_t slot, std::size_t offset, std::size_t nbytes) {
  ex_.check_abort();
  buf_->recv(src, slot, offset, nbytes);
}
void Exec::Buffer::wait_send() {
  ex_.check_abort();
  if (!buf_->waitSend(nullptr, ex_.remaining())) throw AbortedSignal{};
}
void Exec::Buffer::wait_recv() {
  ex_.check_abort();
  if (!buf_->waitRecv(nullptr, ex_.remaining())) throw AbortedSignal{};
}

std::chrono::milliseconds Exec::remaining() const {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(op_.deadline - Clock::now());
  // Gloo treats -1 as "use the context default": never pass it; 1 ms still times out promptly.
  return std::max(left, std::chrono::milliseconds(1));
}

void Exec::check_abort() const {
  if (g_.aborted.load() || g_.peer_failed.load()) throw AbortedSignal{};
}

// ---- header exchange ----

Header make_header(const GroupImpl& g, const OpDesc& op) {
  Header h;
  h.generation = static_cast<std::uint32_t>(g.generation);
  h.seq = op.seq;
  h.op = static_cast<std::uint8_t>(op.kind);
  h.rop = static_cast<std::uint8_t>(op.rop);
  h.root = op.kind == OpKind::broadcast ? op.peer : -1;
  const Tensor& in = op.b.defined() ? op.b : op.a;
  if (in.defined()) {
    h.dtype_in = static_cast<std::uint8_t>(in.dtype());
    h.count_in = in.numel();
  }
  if (op.a.defined()) {
    h.dtype_out = static_cast<std::uint8_t>(op.a.dtype());
    h.count_out = op.a.numel();
  }
  std::string err;
  const int n = g.size;
  if (op.kind != OpKind::barrier) {
    if (!op.a.defined() || (!op.b.defined() && (op.kind == OpKind::all_gather || op.kind == OpKind::reduce_scatter ||
                                                op.kind == OpKind::all_to_all))) {
      err = "tensor is undefined";
    } else if (!op.a.is_contiguous() || (op.b.defined() && !op.b.is_contiguous())) {
      err = "tensor is not contiguous";
    }
  }
  if (err.empty()) {
    switch (op.kind) {
      case OpKind::all_reduce:
        err = reduce_unsupported_reason(op.a.dtype(), op.rop);
        break;
      case OpKind::broadcast:
        if (op.peer < 0 || op.peer >= n) err = fmt::format("root {} is not in [0, {})", op.peer, n);
        break;
      case OpKind::all_gather:
        if (op.a.dtype() != op.b.dtype()) err = fmt::format("output {} vs input {}", op.a.dtype(), op.b.dtype());
        else if (op.a.numel() != n * op.b.numel())
          err = fmt::format("output has {} elements, expected {} (world_size x input)", op.a.numel(), n * op.b.numel());
        break;
      case OpKind::reduce_scatter:
        if (op.a.dtype() != op.b.dtype()) err = fmt::format("output {} vs input {}", op.a.dtype(), op.b.dtype());
        else if (op.b.numel() != n * op.a.numel())
          err = fmt::format("input has {} elements, expected {} (world_size x output)", op.b.numel(), n * op.a.numel());
        else err = reduce_unsupported_reason(op.a.dtype(), op.rop);
        break;
      case OpKind::all_to_all:
        if (op.a.dtype() != op.b.dtype()) err = fmt::format("output {} vs input {}", op.a.dtype(), op.b.dtype());
        else if (op.a.numel() != op.b.numel() || op.b.numel() % n != 0)
          err = fmt::format("input {} and output {} elements must be equal and divisible by {}", op.b.numel(),
                            op.a.numel(), n);
        break;
      default:
        break;
    }
  }
  std::strncpy(h.local_error, err.c_str(), sizeof(h.local_error) - 1);
  return h;
}

void exchange_headers(Exec& ex, const Header& mine) {
  GroupImpl& g = ex.group();
  const OpDesc& op = ex.op();
  const int n = ex.size(), r = ex.rank();
  std::vector<Header> all(static_cast<std::size_t>(n));
  std::vector<int> peers;
  if (is_p2p(op.kind)) {
    peers.push_back(op.peer);
  } else {
    for (int p = 0; p < n; ++p) {
      if (p != r) peers.push_back(p);
    }
  }
  all[static_cast<std::size_t>(r)] = mine;
  if (!peers.empty()) {
    const std::uint64_t slot =
        is_p2p(op.kind) ? (std::uint64_t{2} << 60) | op.p2p_slot_key : kHeaderSlot;
    Header out = mine;
    Exec::Buffer in_buf(ex, all.data(), all.size() * sizeof(Header));
    Exec::Buffer out_buf(ex, &out, sizeof(Header));
    for (int p : peers) in_buf.recv(p, slot, static_cast<std::size_t>(p) * sizeof(Header), sizeof(Header));
    for (int p : peers) out_buf.send(p, slot, 0, sizeof(Header));
    for (std::size_t i = 0; i < peers.size(); ++i) in_buf.wait_recv();
    for (std::size_t i = 0; i < peers.size(); ++i) out_buf.wait_send();
  }

  // Every rank now holds the same headers, so every rank reaches the same verdict and message.
  bool bad = false;
  std::vector<int> ranks = peers;
  ranks.push_back(r);
  std::sort(ranks.begin(), ranks.end());
  for (int p : ranks) {
    const Header& h = all[static_cast<std::size_t>(p)];
    if (h.magic != mine.magic || h.local_error[0] != '\0') bad = true;
    if (is_p2p(op.kind)) {
      const bool pair_ok = h.dtype_in == mine.dtype_in && h.count_in == mine.count_in && h.generation == mine.generation &&
                           (p == r || (h.op != mine.op));  // one send meets one recv
      if (!pair_ok) bad = true;
    } else if (!same_call(h, all[static_cast<std::size_t>(ranks.front())])) {
      bad = true;
    }
  }
  if (!bad) return;
  std::string lines;
  for (int p : ranks) lines += fmt::format("\n  rank {}: {}", p, header_text(all[static_cast<std::size_t>(p)]));
  const std::string what = is_p2p(op.kind) ? fmt::format("{} with rank {}", op_kind_name(op.kind), op.peer)
                                           : std::string(op_kind_name(op.kind));
  throw DistError(DistErrorKind::mismatch, op_kind_name(op.kind), op.seq, {},
                  fmt::format("{} (seq {}, generation {}): ranks called it with different arguments:{}", what, op.seq,
                              g.generation, lines));
}

// ---- algorithms ----

void run_all_reduce(Exec& ex) {
  const OpDesc& op = ex.op();
  Tensor t = op.a;
  const DType dt = t.dtype();
  const std::int64_t count = t.numel();
  const int n = ex.size(), r = ex.rank();
  auto* data = static_cast<std::byte*>(t.data_ptr());
  if (op.rop == ReduceOp::premul_sum) premultiply(data, data, count, dt, op.factor);
  if (n > 1 && count > 0) {
    const ReduceOp cop = combine_op_of(op.rop);
    const std::size_t nbytes = t.nbytes();
    if (nbytes <= kDirectAllReduceBytes || count < n) {
      // Direct: every rank receives every buffer and folds them in rank order (same bits everywhere).
      std::vector<std::byte> all(nbytes * static_cast<std::size_t>(n));
      {
        Exec::Buffer recv_buf(ex, all.data(), all.size());
        Exec::Buffer send_buf(ex, data, nbytes);
        const std::uint64_t slot = ex.data_slot(0);
        for (int p = 0; p < n; ++p) {
          if (p != r) recv_buf.recv(p, slot, static_cast<std::size_t>(p) * nbytes, nbytes);
        }
        for (int p = 0; p < n; ++p) {
          if (p != r) send_buf.send(p, slot, 0, nbytes);
        }
        for (int p = 1; p < n; ++p) recv_buf.wait_recv();
        for (int p = 1; p < n; ++p) send_buf.wait_send();
      }
      std::memcpy(all.data() + static_cast<std::size_t>(r) * nbytes, data, nbytes);
      for (int p = 1; p < n; ++p) combine(all.data(), all.data(), all.data() + static_cast<std::size_t>(p) * nbytes, count, dt, cop);
      std::memcpy(data, all.data(), nbytes);
    } else {
      std::vector<std::size_t> off, len;
      split_even(count, n, dtype_size(dt), off, len);
      ring_reduce_scatter(ex, data, data + off[r], off, len, dt, cop, 0);
      if (op.rop == ReduceOp::avg) {
        finish_avg(data + off[r], static_cast<std::int64_t>(len[r] / dtype_size(dt)), dt, n);
      }
      Exec::Buffer buf(ex, data, nbytes);
      ring_all_gather(ex, buf, off, len, dtype_size(dt), 1);
      return;
    }
  }
  if (op.rop == ReduceOp::avg) finish_avg(data, count, dt, n);
}

void run_broadcast(Exec& ex) {
  const OpDesc& op = ex.op();
  const std::size_t nbytes = op.a.nbytes();
  if (ex.size() == 1 || nbytes == 0) return;
  Exec::Buffer buf(ex, op.a.data_ptr(), nbytes);
  const std::uint64_t slot = ex.data_slot(0);
  if (ex.rank() == op.peer) {
    for (int p = 0; p < ex.size(); ++p) {
      if (p != op.peer) buf.send(p, slot, 0, nbytes);
    }
    for (int p = 1; p < ex.size(); ++p) buf.wait_send();
  } else {
    buf.recv(op.peer, slot, 0, nbytes);
    buf.wait_recv();
  }
}

void run_all_gather(Exec& ex) {
  const OpDesc& op = ex.op();
  const int n = ex.size(), r = ex.rank();
  const std::size_t nb = op.b.nbytes();
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
  if (nb == 0) return;
  if (out + static_cast<std::size_t>(r) * nb != op.b.data_ptr()) {
    std::memmove(out + static_cast<std::size_t>(r) * nb, op.b.data_ptr(), nb);
  }
  if (n == 1) return;
  std::vector<std::size_t> off(n), len(n, nb);
  for (int i = 0; i < n; ++i) off[i] = static_cast<std::size_t>(i) * nb;
  Exec::Buffer buf(ex, out, nb * static_cast<std::size_t>(n));
  ring_all_gather(ex, buf, off, len, op.b.itemsize(), 0);
}

void run_reduce_scatter(Exec& ex) {
  const OpDesc& op = ex.op();
  const int n = ex.size();
  const DType dt = op.a.dtype();
  const std::int64_t m = op.a.numel();
  if (m == 0) return;
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
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
    std::vector<std::size_t> off(n), len(n, nb);
    for (int i = 0; i < n; ++i) off[i] = static_cast<std::size_t>(i) * nb;
    ring_reduce_scatter(ex, src, out, off, len, dt, combine_op_of(op.rop), 0);
  }
  if (op.rop == ReduceOp::avg) finish_avg(out, m, dt, n);
}

void run_all_to_all(Exec& ex) {
  const OpDesc& op = ex.op();
  const int n = ex.size(), r = ex.rank();
  const std::size_t block = op.b.nbytes() / static_cast<std::size_t>(n);
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
  auto* in = static_cast<std::byte*>(op.b.data_ptr());
  if (block == 0) return;
  std::memmove(out + static_cast<std::size_t>(r) * block, in + static_cast<std::size_t>(r) * block, block);
  if (n == 1) return;
  Exec::Buffer out_buf(ex, out, block * static_cast<std::size_t>(n));
  Exec::Buffer in_buf(ex, in, block * static_cast<std::size_t>(n));
  const std::uint64_t slot = ex.data_slot(0);
  for (int p = 0; p < n; ++p) {
    if (p != r) out_buf.recv(p, slot, static_cast<std::size_t>(p) * block, block);
  }
  for (int k = 1; k < n; ++k) {  // staggered so that not every rank starts with rank 0
    const int p = (r + k) % n;
    in_buf.send(p, slot, static_cast<std::size_t>(p) * block, block);
  }
  for (int p = 1; p < n; ++p) out_buf.wait_recv();
  for (int p = 1; p < n; ++p) in_buf.wait_send();
}

void run_send(Exec& ex) {
  const OpDesc& op = ex.op();
  if (op.a.nbytes() == 0) return;
  Exec::Buffer buf(ex, op.a.data_ptr(), op.a.nbytes());
  buf.send(op.peer, (std::uint64_t{3} << 60) | op.p2p_slot_key, 0, op.a.nbytes());
  buf.wait_send();
}

void run_recv(Exec& ex) {
  const OpDesc& op = ex.op();
  if (op.a.nbytes() == 0) return;
  Exec::Buffer buf(ex, op.a.data_ptr(), op.a.nbytes());
  buf.recv(op.peer, (std::uint64_t{3} << 60) | op.p2p_slot_key, 0, op.a.nbytes());
  buf.wait_recv();
}

}  // namespace lmcore::dist::detail
