// The collective algorithms, each over Gloo's unbound buffers with lmcore's own bounded waits.
//
// Rings send to rank+1 and receive from rank-1, with each segment cut into pipelined pieces (see
// ring_chunks); below GroupOptions::direct_max_bytes, blocks go straight to the rank that needs them.
// Every payload call is preceded by exchange_headers (a barrier in itself), which checks that all
// ranks called the same thing.
#include <algorithm>
#include <cstring>
#include <deque>

#include "src/dist/group_impl.h"
#include "src/dist/reduce.h"

namespace lmcore::dist::detail {

namespace {

constexpr std::uint64_t kHeaderSlot = 1;
// Up to this many bytes (and direct_max_bytes) all_reduce sends every rank's whole buffer to every
// peer and folds in rank order: one latency instead of two, for (n-1) times the bytes.
constexpr std::size_t kDirectAllReduceBytes = 64 * 1024;

std::string header_text(const Header& h) {
  std::string s = fmt::format("{} {}", op_kind_name(static_cast<OpKind>(h.op)), dtype_name(static_cast<DType>(h.dtype_in)));
  const auto kind = static_cast<OpKind>(h.op);
  if (kind == OpKind::all_reduce || kind == OpKind::reduce_scatter) {
    s += fmt::format(" op={}", reduce_op_name(static_cast<ReduceOp>(h.rop)));
  }
  if (kind == OpKind::broadcast) s += fmt::format(" root={}", h.root);
  s += fmt::format(" in={} out={} elements (seq {}, generation {}; direct_max_bytes {}, ring_chunk_bytes {})",
                   h.count_in, h.count_out, h.seq, h.generation, h.direct_max_bytes, h.ring_chunk_bytes);
  if (h.local_error[0] != '\0') s += fmt::format(" invalid here: {}", std::string(h.local_error, strnlen(h.local_error, sizeof(h.local_error))));
  return s;
}

// uneven_splits: an all_to_all_single whose element counts legitimately differ across ranks (the
// split tables are compared in a second round instead).
bool same_call(const Header& a, const Header& b, bool uneven_splits) {
  return a.generation == b.generation && a.seq == b.seq && a.op == b.op && a.dtype_in == b.dtype_in &&
         a.dtype_out == b.dtype_out && a.rop == b.rop && a.root == b.root &&
         (uneven_splits || (a.count_in == b.count_in && a.count_out == b.count_out)) &&
         a.direct_max_bytes == b.direct_max_bytes && a.ring_chunk_bytes == b.ring_chunk_bytes;
}

constexpr std::uint64_t kSplitsSlot = 2;

std::int64_t row_elements(const Tensor& t) {
  std::int64_t e = 1;
  for (std::int64_t d = 1; d < t.dim(); ++d) e *= t.size(d);
  return e;
}

// Why all_to_all_single's arguments are invalid on this rank, or empty.
std::string all_to_all_problem(const OpDesc& op, int n) {
  const Tensor &out = op.a, &in = op.b;
  if (out.dtype() != in.dtype()) return fmt::format("output {} vs input {}", out.dtype(), in.dtype());
  if (op.input_split_rows.empty() && op.output_split_rows.empty()) {
    if (out.numel() != in.numel() || in.numel() % n != 0) {
      return fmt::format("input {} and output {} elements must be equal and divisible by {}", in.numel(), out.numel(), n);
    }
    return "";
  }
  if (in.dim() == 0 || out.dim() == 0) return "split sizes need tensors with at least one dimension";
  if (row_elements(in) != row_elements(out)) {
    return fmt::format("input rows have {} elements, output rows {}", row_elements(in), row_elements(out));
  }
  for (const auto* v : {&op.input_split_rows, &op.output_split_rows}) {
    const bool is_in = v == &op.input_split_rows;
    const char* name = is_in ? "input_split_sizes" : "output_split_sizes";
    const std::int64_t rows = (is_in ? in : out).size(0);
    if (v->empty()) {
      if (rows % n != 0) return fmt::format("{} is empty (equal splits) but {} rows do not divide by {}", name, rows, n);
      continue;
    }
    if (static_cast<int>(v->size()) != n) return fmt::format("{} has {} entries, expected {} (world size)", name, v->size(), n);
    std::int64_t sum = 0;
    for (std::int64_t x : *v) {
      if (x < 0) return fmt::format("{} holds {} < 0", name, x);
      sum += x;
    }
    if (sum != rows) return fmt::format("{} sums to {}, but the {} has {} rows", name, sum, is_in ? "input" : "output", rows);
  }
  return "";
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

// Rings pipeline their segments: each is cut into pieces of about GroupOptions::ring_chunk_bytes,
// and up to kRingInflight pieces are in flight, so a piece is forwarded as soon as it has arrived (and
// been reduced) rather than a whole segment per step, which kept a rank idle while its left neighbour
// worked through its segment. Every rank derives the same cuts from the same sizes and options.
constexpr int kRingInflight = 4;

int ring_chunks(const Exec& ex, std::size_t max_len) {
  const std::size_t c = std::max<std::size_t>(ex.group().options.ring_chunk_bytes, 1);
  return static_cast<int>(std::max<std::size_t>(1, (max_len + c - 1) / c));
}
// At most `chunks`: piece (k-1, j) must complete before piece (k, j), which forwards it, is posted.
int ring_inflight(int chunks) { return std::min(chunks, kRingInflight); }
std::size_t direct_bytes(const Exec& ex) { return ex.group().options.direct_max_bytes; }

// Piece j of `chunks` of a byte range of `len` bytes starting at `off`, cut at multiples of `align`.
void piece_of(std::size_t off, std::size_t len, int j, int chunks, std::size_t align, std::size_t& o, std::size_t& l) {
  const std::size_t units = len / align;
  const std::size_t a = units * static_cast<std::size_t>(j) / static_cast<std::size_t>(chunks);
  const std::size_t b = units * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(chunks);
  o = off + a * align;
  l = (j + 1 == chunks ? len - a * align : (b - a) * align);
}

// Ring all-gather over `buf` whose segment i is [off[i], off[i]+len[i]) and this rank's segment is
// already in place. Step k sends segment (r-k) and receives segment (r-k-1), piece by piece; piece j
// of step k forwards what piece j of step k-1 received.
void ring_all_gather(Exec& ex, Exec::Buffer& buf, const std::vector<std::size_t>& off,
                     const std::vector<std::size_t>& len, std::size_t align, std::uint32_t step) {
  const int n = ex.size(), r = ex.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const std::uint64_t slot = ex.data_slot(step);
  const int chunks = ring_chunks(ex, *std::max_element(len.begin(), len.end()));
  const int window = ring_inflight(chunks);  // <= chunks: piece (k-1, j) completes before (k, j) is posted
  struct Posted { bool send, recv; };
  std::deque<Posted> inflight;
  auto complete_oldest = [&] {
    const Posted p = inflight.front();
    inflight.pop_front();
    if (p.recv) buf.wait_recv();
    if (p.send) buf.wait_send();
  };
  for (int i = 0; i < (n - 1) * chunks; ++i) {
    const int k = i / chunks, j = i % chunks;
    if (static_cast<int>(inflight.size()) == window) complete_oldest();
    const int s_seg = ((r - k) % n + n) % n, r_seg = ((r - k - 1) % n + n) % n;
    std::size_t so, sl, ro, rl;
    piece_of(off[s_seg], len[s_seg], j, chunks, align, so, sl);
    piece_of(off[r_seg], len[r_seg], j, chunks, align, ro, rl);
    if (rl > 0) buf.recv(left, slot, ro, rl);
    if (sl > 0) buf.send(right, slot, so, sl);
    inflight.push_back({sl > 0, rl > 0});
  }
  while (!inflight.empty()) complete_oldest();
}

// Ring reduce-scatter: segment s of `src` is this rank's contribution to segment s; afterwards
// `out` holds the reduction over all ranks of segment r (`out` may lie inside `src`'s segment r).
// Step k sends the partial sum of segment (r-k-1) and receives the partial sum of segment (r-k-2),
// adding this rank's own contribution in place, to forward it at step k+1; the last step adds into
// `out`. Each rank moves (n-1)/n of the buffer, piece by piece (see ring_chunks).
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
  const int chunks = ring_chunks(ex, max_len);
  const int window = ring_inflight(chunks);
  // Two receive buffers, by step parity: piece j of buf[k%2] is received at step k, reduced, sent at
  // step k+1 and received into again at step k+2, after that send completed (window <= chunks).
  // Kept by the group between calls: fresh pages would cost a fault each, every call.
  auto& scratch = ex.group().ring_scratch;
  if (scratch.size() < 2 * max_len) scratch.resize(2 * max_len);
  std::byte* tmp_mem[2] = {scratch.data(), scratch.data() + max_len};
  Exec::Buffer in_buf(ex, src, total);
  Exec::Buffer tmp0(ex, tmp_mem[0], max_len), tmp1(ex, tmp_mem[1], max_len);
  Exec::Buffer* tmp[2] = {&tmp0, &tmp1};
  const std::uint64_t slot = ex.data_slot(step);

  struct Posted { int k; Exec::Buffer* send_buf; bool sent, recvd; std::size_t roff, rlen; int r_seg; };
  std::deque<Posted> inflight;
  auto complete_oldest = [&] {
    const Posted p = inflight.front();
    inflight.pop_front();
    if (p.recvd) tmp[p.k % 2]->wait_recv();
    if (p.sent) p.send_buf->wait_send();
    if (p.rlen == 0) return;
    // The received partial sum of this piece, plus this rank's own contribution to it.
    const std::size_t rel = p.roff - off[p.r_seg];
    std::byte* received = tmp_mem[p.k % 2] + rel;
    std::byte* dst = (p.k == n - 2) ? out + rel : received;
    combine(dst, received, src + p.roff, static_cast<std::int64_t>(p.rlen / es), dtype, combine_op);
  };
  for (int i = 0; i < (n - 1) * chunks; ++i) {
    const int k = i / chunks, j = i % chunks;
    if (static_cast<int>(inflight.size()) == window) complete_oldest();  // reduces piece (k-1, j) in time
    const int s_seg = ((r - k - 1) % n + n) % n, r_seg = ((r - k - 2) % n + n) % n;
    std::size_t so, sl, ro, rl;
    piece_of(off[s_seg], len[s_seg], j, chunks, es, so, sl);
    piece_of(off[r_seg], len[r_seg], j, chunks, es, ro, rl);
    Exec::Buffer* send_buf = k == 0 ? &in_buf : tmp[(k - 1) % 2];
    const std::size_t send_off = k == 0 ? so : so - off[s_seg];
    if (rl > 0) tmp[k % 2]->recv(left, slot, ro - off[r_seg], rl);
    if (sl > 0) send_buf->send(right, slot, send_off, sl);
    inflight.push_back({k, send_buf, sl > 0, rl > 0, ro, rl, r_seg});
  }
  while (!inflight.empty()) complete_oldest();
}

// Direct all-gather over `buf` (segments as in ring_all_gather) on `slot`: this rank's segment goes
// straight to every peer. The same bytes as the ring, in one latency instead of n-1.
void direct_all_gather(Exec& ex, Exec::Buffer& buf, const std::vector<std::size_t>& off,
                       const std::vector<std::size_t>& len, std::uint64_t slot) {
  const int n = ex.size(), r = ex.rank();
  int recvs = 0, sends = 0;
  for (int p = 0; p < n; ++p) {
    if (p != r && len[p] > 0) {
      buf.recv(p, slot, off[p], len[p]);
      ++recvs;
    }
  }
  for (int k = 1; k < n && len[r] > 0; ++k, ++sends) buf.send((r + k) % n, slot, off[r], len[r]);
  for (int i = 0; i < recvs; ++i) buf.wait_recv();
  for (int i = 0; i < sends; ++i) buf.wait_send();
}

// Direct reduce-scatter (segments as in ring_reduce_scatter): segment p of `src` goes straight to
// rank p, which folds the n contributions in rank order. The same (n-1)/n of the data as the ring,
// in one latency instead of n-1.
void direct_reduce_scatter(Exec& ex, std::byte* src, std::byte* out, const std::vector<std::size_t>& off,
                           const std::vector<std::size_t>& len, DType dtype, ReduceOp combine_op, std::uint32_t step) {
  const int n = ex.size(), r = ex.rank();
  const std::size_t mine = len[r];
  std::size_t total = 0;
  for (int i = 0; i < n; ++i) total = std::max(total, off[i] + len[i]);
  auto& scratch = ex.group().ring_scratch;
  const std::size_t parts_bytes = std::max<std::size_t>(mine * static_cast<std::size_t>(n), 1);
  if (scratch.size() < parts_bytes) scratch.resize(parts_bytes);
  std::byte* parts = scratch.data();  // part p: rank p's contribution to this rank's segment
  {
    Exec::Buffer recv_buf(ex, parts, parts_bytes);
    Exec::Buffer send_buf(ex, src, total);
    const std::uint64_t slot = ex.data_slot(step);
    int recvs = 0, sends = 0;
    for (int p = 0; p < n; ++p) {
      if (p != r && mine > 0) {
        recv_buf.recv(p, slot, static_cast<std::size_t>(p) * mine, mine);
        ++recvs;
      }
    }
    for (int k = 1; k < n; ++k) {
      const int p = (r + k) % n;
      if (len[p] > 0) {
        send_buf.send(p, slot, off[p], len[p]);
        ++sends;
      }
    }
    for (int i = 0; i < recvs; ++i) recv_buf.wait_recv();
    for (int i = 0; i < sends; ++i) send_buf.wait_send();
  }
  if (mine == 0) return;
  std::memcpy(parts + static_cast<std::size_t>(r) * mine, src + off[r], mine);
  const std::int64_t count = static_cast<std::int64_t>(mine / dtype_size(dtype));
  combine(out, parts, parts + mine, count, dtype, combine_op);
  for (int p = 2; p < n; ++p) combine(out, out, parts + static_cast<std::size_t>(p) * mine, count, dtype, combine_op);
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
  h.direct_max_bytes = g.options.direct_max_bytes;
  h.ring_chunk_bytes = g.options.ring_chunk_bytes;
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
        err = all_to_all_problem(op, n);
        break;
      default:
        break;
    }
  }
  h.uneven_splits = op.kind == OpKind::all_to_all && (!op.input_split_rows.empty() || !op.output_split_rows.empty());
  std::strncpy(h.local_error, err.c_str(), sizeof(h.local_error) - 1);
  return h;
}

std::vector<std::int64_t> all_to_all_split_elements(const OpDesc& op, int world_size, bool input) {
  const Tensor& t = input ? op.b : op.a;
  const std::vector<std::int64_t>& rows = input ? op.input_split_rows : op.output_split_rows;
  if (rows.empty()) return std::vector<std::int64_t>(static_cast<std::size_t>(world_size), t.numel() / world_size);
  std::vector<std::int64_t> e(rows.size());
  for (std::size_t j = 0; j < rows.size(); ++j) e[j] = rows[j] * row_elements(t);
  return e;
}

namespace {

// all_to_all_single with split sizes: every rank sends its whole table (elements to and from each
// rank) to every peer, so all ranks check every pair and reach the same verdict.
void check_split_tables(Exec& ex) {
  const OpDesc& op = ex.op();
  const int n = ex.size(), r = ex.rank();
  const std::size_t row = 2 * static_cast<std::size_t>(n);  // [to rank 0..n-1, from rank 0..n-1]
  std::vector<std::int64_t> table(row * static_cast<std::size_t>(n));
  const auto to = all_to_all_split_elements(op, n, true), from = all_to_all_split_elements(op, n, false);
  std::copy(to.begin(), to.end(), table.begin() + static_cast<std::ptrdiff_t>(row * r));
  std::copy(from.begin(), from.end(), table.begin() + static_cast<std::ptrdiff_t>(row * r + n));
  {
    Exec::Buffer buf(ex, table.data(), table.size() * sizeof(std::int64_t));
    std::vector<std::size_t> off, len;
    split_even(n, n, row * sizeof(std::int64_t), off, len);  // one row per rank
    direct_all_gather(ex, buf, off, len, kSplitsSlot);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      const std::int64_t sends = table[row * a + b], expects = table[row * b + n + a];
      if (sends == expects) continue;
      std::string lines;
      for (int p = 0; p < n; ++p) {
        const auto* t = table.data() + row * static_cast<std::size_t>(p);
        lines += fmt::format("\n  rank {}: elements to ranks [{}], from ranks [{}]", p,
                             fmt::join(t, t + n, ", "), fmt::join(t + n, t + 2 * n, ", "));
      }
      throw DistError(DistErrorKind::mismatch, op_kind_name(op.kind), op.seq, {},
                      fmt::format("all_to_all_single (seq {}, generation {}): split sizes disagree: rank {} sends {} "
                                  "elements to rank {}, which expects {} from it:{}",
                                  op.seq, ex.group().generation, a, sends, b, expects, lines));
    }
  }
}

}  // namespace

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
  bool uneven = false;
  for (int p : ranks) uneven = uneven || all[static_cast<std::size_t>(p)].uneven_splits != 0;
  for (int p : ranks) {
    const Header& h = all[static_cast<std::size_t>(p)];
    if (h.magic != mine.magic || h.local_error[0] != '\0') bad = true;
    if (is_p2p(op.kind)) {
      const bool pair_ok = h.dtype_in == mine.dtype_in && h.count_in == mine.count_in && h.generation == mine.generation &&
                           (p == r || (h.op != mine.op));  // one send meets one recv
      if (!pair_ok) bad = true;
    } else if (!same_call(h, all[static_cast<std::size_t>(ranks.front())], uneven)) {
      bad = true;
    }
  }
  if (!bad) {
    if (uneven && op.kind == OpKind::all_to_all) check_split_tables(ex);
    return;
  }
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
    if (nbytes <= std::min(kDirectAllReduceBytes, direct_bytes(ex)) || count < n) {
      // Direct: every rank receives every buffer and folds them in rank order (same bits everywhere).
      std::vector<std::byte> all(nbytes * static_cast<std::size_t>(n));
      std::memcpy(all.data() + static_cast<std::size_t>(r) * nbytes, data, nbytes);
      {
        Exec::Buffer buf(ex, all.data(), all.size());
        std::vector<std::size_t> off, len;
        split_even(n, n, nbytes, off, len);  // one whole buffer per rank
        direct_all_gather(ex, buf, off, len, ex.data_slot(0));
      }
      for (int p = 1; p < n; ++p) combine(all.data(), all.data(), all.data() + static_cast<std::size_t>(p) * nbytes, count, dt, cop);
      std::memcpy(data, all.data(), nbytes);
    } else {
      // A reduce-scatter, then an all-gather of the reduced segments: 2(n-1)/n of the data.
      std::vector<std::size_t> off, len;
      split_even(count, n, dtype_size(dt), off, len);
      const bool direct = nbytes <= direct_bytes(ex);
      if (direct) {
        direct_reduce_scatter(ex, data, data + off[r], off, len, dt, cop, 0);
      } else {
        ring_reduce_scatter(ex, data, data + off[r], off, len, dt, cop, 0);
      }
      if (op.rop == ReduceOp::avg) {
        finish_avg(data + off[r], static_cast<std::int64_t>(len[r] / dtype_size(dt)), dt, n);
      }
      Exec::Buffer buf(ex, data, nbytes);
      if (direct) {
        direct_all_gather(ex, buf, off, len, ex.data_slot(1));
      } else {
        ring_all_gather(ex, buf, off, len, dtype_size(dt), 1);
      }
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
  Exec::Buffer buf(ex, out, nb * static_cast<std::size_t>(n));
  std::vector<std::size_t> off, len;
  split_even(n, n, nb, off, len);  // one input per rank
  if (nb * static_cast<std::size_t>(n) <= direct_bytes(ex)) {
    direct_all_gather(ex, buf, off, len, ex.data_slot(0));
  } else {
    ring_all_gather(ex, buf, off, len, op.b.itemsize(), 0);
  }
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
    std::vector<std::size_t> off, len;
    split_even(n, n, nb, off, len);  // one output per rank
    if (nb * static_cast<std::size_t>(n) <= direct_bytes(ex)) {
      direct_reduce_scatter(ex, src, out, off, len, dt, combine_op_of(op.rop), 0);
    } else {
      ring_reduce_scatter(ex, src, out, off, len, dt, combine_op_of(op.rop), 0);
    }
  }
  if (op.rop == ReduceOp::avg) finish_avg(out, m, dt, n);
}

void run_all_to_all(Exec& ex) {
  const OpDesc& op = ex.op();
  const int n = ex.size(), r = ex.rank();
  const std::size_t es = op.b.itemsize();
  const auto to = all_to_all_split_elements(op, n, true), from = all_to_all_split_elements(op, n, false);
  std::vector<std::size_t> to_off(n + 1, 0), from_off(n + 1, 0);  // bytes
  for (int p = 0; p < n; ++p) {
    to_off[p + 1] = to_off[p] + static_cast<std::size_t>(to[p]) * es;
    from_off[p + 1] = from_off[p] + static_cast<std::size_t>(from[p]) * es;
  }
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
  auto* in = static_cast<std::byte*>(op.b.data_ptr());
  if (to[r] > 0) std::memmove(out + from_off[r], in + to_off[r], static_cast<std::size_t>(to[r]) * es);
  if (n == 1) return;
  std::unique_ptr<Exec::Buffer> out_buf, in_buf;
  // Only when something moves: Gloo buffers need a non-empty range.
  if (from_off[n] > from_off[r + 1] - from_off[r]) out_buf = std::make_unique<Exec::Buffer>(ex, out, from_off[n]);
  if (to_off[n] > to_off[r + 1] - to_off[r]) in_buf = std::make_unique<Exec::Buffer>(ex, in, to_off[n]);
  const std::uint64_t slot = ex.data_slot(0);
  int recvs = 0, sends = 0;
  for (int p = 0; p < n; ++p) {
    if (p != r && from[p] > 0) {
      out_buf->recv(p, slot, from_off[p], from_off[p + 1] - from_off[p]);
      ++recvs;
    }
  }
  for (int k = 1; k < n; ++k) {  // staggered so that not every rank starts with rank 0
    const int p = (r + k) % n;
    if (to[p] > 0) {
      in_buf->send(p, slot, to_off[p], to_off[p + 1] - to_off[p]);
      ++sends;
    }
  }
  for (int i = 0; i < recvs; ++i) out_buf->wait_recv();
  for (int i = 0; i < sends; ++i) in_buf->wait_send();
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
