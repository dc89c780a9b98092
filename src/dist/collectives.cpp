// The collective algorithms, each over Gloo's unbound buffers with lmcore's own bounded waits.
//
// Rings send to rank+1 and receive from rank-1, with each segment cut into pipelined pieces (see
// ring_chunks); below GroupOptions::direct_max_bytes, blocks go straight to the rank that needs them.
// Every call starts with exchange_headers (a barrier in itself), which checks that all ranks called
// the same thing; up to inline_limit(n) per peer, the payload travels in that same round.
#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <stdexcept>

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
  if (h.inline_bytes != 0) s += fmt::format(" with {} payload bytes", h.inline_bytes);
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

constexpr std::size_t kMinRingPiece = 128 * 1024;

int ring_chunks(const Exec& ex, std::size_t max_len) {
  const std::size_t c = std::max<std::size_t>(ex.group().config.ring_chunk_bytes, 1);
  // At least two pieces once a segment is large: a neighbour can then forward the first half
  // while the second is still arriving (Gloo's own ring allgather always halves its segments).
  const std::size_t at_least = max_len >= 2 * kMinRingPiece ? 2 : 1;
  return static_cast<int>(std::max<std::size_t>(at_least, (max_len + c - 1) / c));
}
// At most `chunks`: piece (k-1, j) must complete before piece (k, j), which forwards it, is posted.
int ring_inflight(int chunks) { return std::min(chunks, kRingInflight); }
std::size_t direct_bytes(const Exec& ex) { return ex.group().config.direct_max_bytes; }

// Piece j of `chunks` of a byte range of `len` bytes starting at `off`, cut at multiples of `align`.
void piece_of(std::size_t off, std::size_t len, int j, int chunks, std::size_t align, std::size_t& o, std::size_t& l) {
  const std::size_t units = len / align;
  const std::size_t a = units * static_cast<std::size_t>(j) / static_cast<std::size_t>(chunks);
  const std::size_t b = units * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(chunks);
  o = off + a * align;
  l = (j + 1 == chunks ? len - a * align : (b - a) * align);
}

// out = part(0) (op) part(1) (op) ... (op) part(n-1), folded in rank order, so that every rank gets the
// same bits; n >= 2. `out` may be one of the parts.
template <typename PartOf>
void fold_in_rank_order(void* out, int n, PartOf&& part, std::int64_t count, DType dtype, ReduceOp op) {
  combine(out, part(0), part(1), count, dtype, op);
  for (int p = 2; p < n; ++p) combine(out, out, part(p), count, dtype, op);
}

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
  Exec::Buffer& src;
  std::byte* dst;
  std::size_t bytes;
  void place() const { std::memcpy(dst, src.data(), bytes); }
};

// Ring all-gather over `buf` whose segment i is [off[i], off[i]+len[i]) and this rank's segment is
// already in place (or leaves from `own`). Step k sends segment (r-k) and receives segment (r-k-1),
// piece by piece; piece j of step k forwards what piece j of step k-1 received. Every receive is posted up front (each piece
// has its own place in `buf`), so a peer never waits for this rank to post one.
//
// With a gate no rank waits for every header first. A rank sends only if its right neighbour agrees
// with it, and before it waits for the data of step k it checks the headers of the k+1 ranks that
// data passed through (r-1 ... r-k-1): those ranks have started the call, or the data could not come,
// so the check costs no extra wait. If they all agree, each of them passed the same checks on its
// part of the way and the data does come. If one disagrees, this rank stops, and waits for exactly
// what its left neighbour still sends (that follows from the headers, see `left_sends`), so nothing
// is left half-sent before the gate throws the mismatch error.
void ring_all_gather(Exec& ex, Exec::Buffer& buf, const std::vector<std::size_t>& off,
                     const std::vector<std::size_t>& len, std::size_t align, std::uint32_t step,
                     AllGatherGate* gate = nullptr, OwnSegment* own = nullptr) {
  const int n = ex.size(), r = ex.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const std::uint64_t slot = ex.data_slot(step);
  const int chunks = ring_chunks(ex, *std::max_element(len.begin(), len.end()));
  auto before = [&](int d) { return ((r - d) % n + n) % n; };  // the rank (and segment) d places left
  auto piece = [&](int seg, int j, std::size_t& o, std::size_t& l) { piece_of(off[seg], len[seg], j, chunks, align, o, l); };
  auto agrees = [&](int p) { return gate == nullptr || gate->agrees(p); };
  int recvs = 0, sends = 0;
  std::vector<int> recvs_of_step(static_cast<std::size_t>(n - 1), 0);  // empty pieces are not posted
  for (int k = 0; k < n - 1; ++k) {
    for (int j = 0; j < chunks; ++j) {
      std::size_t ro, rl;
      piece(before(k + 1), j, ro, rl);
      if (rl > 0) {
        buf.recv(left, slot, ro, rl);
        ++recvs_of_step[static_cast<std::size_t>(k)];
      }
    }
    recvs += recvs_of_step[static_cast<std::size_t>(k)];
  }
  bool ok = agrees(right);
  Exec::Buffer& from = own != nullptr ? own->src : buf;  // where step 0 sends from
  const std::size_t from_base = own != nullptr ? off[r] : 0;
  int own_sends = 0;
  for (int j = 0; j < chunks && ok; ++j) {
    std::size_t so, sl;
    piece(r, j, so, sl);
    if (sl > 0) {
      from.send(right, slot, so - from_base, sl);
      ++own_sends;
    }
  }
  if (own != nullptr) own->place();
  auto wait_sends = [&] {
    for (int i = 0; i < own_sends; ++i) from.wait_send();
    for (int i = 0; i < sends; ++i) buf.wait_send();
  };
  // Receives complete in the order they were posted (one slot, one sender, one stream).
  int waited = 0, checked = 0;  // ranks r-1 ... r-checked agree
  auto chain_agrees = [&](int k) {  // the ranks step k's data passed through
    for (; ok && checked < k + 1; ++checked) ok = agrees(before(checked + 1));
    return ok;
  };
  for (int k = 1; k < n - 1 && chain_agrees(k - 1); ++k) {
    for (int j = 0; j < chunks; ++j) {
      std::size_t o, l;
      piece(before(k), j, o, l);  // received as piece j of step k-1, forwarded now
      if (l > 0) {
        buf.wait_recv();
        ++waited;
        buf.send(right, slot, o, l);
        ++sends;
      }
    }
  }
  if (chain_agrees(n - 2)) {
    for (; waited < recvs; ++waited) buf.wait_recv();
    wait_sends();
    if (gate != nullptr) gate->finish();
    return;
  }
  // A mismatch. The left neighbour sends step 0 if it agrees with this rank, and step k if, in
  // addition, ranks r-2 ... r-k-1 agree with it (its own checks, the same as this rank's).
  int left_sends = 0;
  for (int k = 0; k < n - 1 && agrees(left); ++k) {
    if (k > 0 && !agrees(before(k + 1))) break;
    left_sends += recvs_of_step[static_cast<std::size_t>(k)];
  }
  for (; waited < left_sends; ++waited) buf.wait_recv();
  wait_sends();
  gate->finish();  // throws: some rank disagrees
  throw std::logic_error("ring_all_gather: ranks disagree but the header round found no mismatch");
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
// straight to every peer. The same bytes as the ring, in one latency instead of n-1. With a gate,
// the segment goes to each peer that agrees, and the data of every agreeing peer is in before the
// gate's verdict is taken (a disagreeing peer sends nothing to this rank, nor this rank to it).
void direct_all_gather(Exec& ex, Exec::Buffer& buf, const std::vector<std::size_t>& off,
                       const std::vector<std::size_t>& len, std::uint64_t slot, AllGatherGate* gate = nullptr,
                       OwnSegment* own = nullptr) {
  const int n = ex.size(), r = ex.rank();
  for (int p = 0; p < n; ++p) {
    if (p != r && len[p] > 0) buf.recv(p, slot, off[p], len[p]);
  }
  Exec::Buffer& from = own != nullptr ? own->src : buf;
  const std::size_t from_off = own != nullptr ? 0 : off[r];
  int recvs = 0, sends = 0;
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    if (gate != nullptr && !gate->agrees(p)) continue;
    if (len[p] > 0) ++recvs;
    if (len[r] > 0) {
      from.send(p, slot, from_off, len[r]);
      ++sends;
    }
  }
  if (own != nullptr) own->place();
  for (int i = 0; i < recvs; ++i) buf.wait_recv();
  for (int i = 0; i < sends; ++i) from.wait_send();
  if (gate != nullptr) gate->finish();
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
  fold_in_rank_order(out, n, [&](int p) { return parts + static_cast<std::size_t>(p) * mine; }, count, dtype, combine_op);
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
  h.direct_max_bytes = g.config.direct_max_bytes;
  h.ring_chunk_bytes = g.config.ring_chunk_bytes;
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

// The first round can carry the payload itself when each peer's share is at most inline_limit(n)
// and the call would take a one-round direct path anyway (so direct_max_bytes still decides: 0
// forces the rings). Then a collective costs one latency, as in Gloo, instead of a header round
// followed by a payload round. Every receive is posted for a header plus inline_limit(n), whatever
// this rank expects, so a peer that disagrees (and so sends more or less) still lands inside the
// buffer; the headers then disagree and no rank uses a payload.
//
// The limit shares about 4 MiB of receive buffer among the peers, between 256 KiB and 1 MiB each:
// with 4 ranks a 4 MiB all_gather_single then travels in one message per peer, which measured
// about 0.8 of Gloo's ring allgather as a header round plus a data round (see bench comm).
constexpr std::size_t kInlineBudget = 4u << 20, kMinInline = 256u << 10, kMaxInline = 1u << 20;
std::size_t inline_limit(int n) {
  return std::clamp<std::size_t>(kInlineBudget / static_cast<std::size_t>(std::max(n - 1, 1)), kMinInline, kMaxInline);
}

struct InlinePlan {
  bool on = false;            // the payload rides with the headers
  bool same_for_all = true;   // every peer gets the same share (else share p goes to peer p)
  std::size_t bytes = 0;      // one share
};

InlinePlan inline_plan(const Exec& ex, const Header& mine) {
  InlinePlan plan;
  const OpDesc& op = ex.op();
  const std::size_t n = static_cast<std::size_t>(ex.size()), direct = direct_bytes(ex);
  if (mine.local_error[0] != '\0' || n == 1 || is_p2p(op.kind)) return plan;
  switch (op.kind) {
    case OpKind::all_gather:
      plan.bytes = op.b.nbytes();
      plan.on = plan.bytes * n <= direct;
      break;
    case OpKind::all_reduce:
      plan.bytes = op.a.nbytes();
      plan.on = plan.bytes <= std::min(kDirectAllReduceBytes, direct);
      break;
    case OpKind::broadcast:
      plan.bytes = op.a.nbytes();
      plan.on = plan.bytes <= direct;
      break;
    case OpKind::reduce_scatter:
      plan.bytes = op.a.nbytes();
      plan.same_for_all = false;
      plan.on = plan.bytes * n <= direct;
      break;
    case OpKind::all_to_all:
      plan.bytes = op.b.nbytes() / n;
      plan.same_for_all = false;
      plan.on = mine.uneven_splits == 0 && op.b.nbytes() <= direct;
      break;
    default:
      break;
  }
  plan.on = plan.on && plan.bytes <= inline_limit(ex.size());
  return plan;
}

// Whether `sender` puts a share in its first-round messages under `plan` (a broadcast: the root only).
bool sends_share(const Exec& ex, const InlinePlan& plan, int sender) {
  return plan.on && (ex.op().kind != OpKind::broadcast || sender == ex.op().peer);
}

// This rank's share for `peer` (for reduce_scatter and all_reduce also its own contribution, with
// premul_sum's factor applied, so that the fold takes every contribution from the same place).
void write_share(const Exec& ex, const InlinePlan& plan, int peer, std::byte* dst) {
  const OpDesc& op = ex.op();
  if (plan.bytes == 0) return;
  const auto* in = static_cast<const std::byte*>(op.b.defined() ? op.b.data_ptr() : op.a.data_ptr());
  const std::byte* src = plan.same_for_all ? in : in + static_cast<std::size_t>(peer) * plan.bytes;
  const bool scale = op.rop == ReduceOp::premul_sum && (op.kind == OpKind::all_reduce || op.kind == OpKind::reduce_scatter);
  if (scale) {
    premultiply(dst, src, static_cast<std::int64_t>(plan.bytes / op.a.itemsize()), op.a.dtype(), op.factor);
  } else {
    std::memcpy(dst, src, plan.bytes);
  }
}

// The header round, in two halves so that all_gather can overlap it with its first data step: the
// constructor posts every send and receive, agrees(p) waits for one peer's header, finish() for all
// of them, and throws the mismatch error (the same on every rank) if any two disagree.
class HeaderRound final : public AllGatherGate {
 public:
  HeaderRound(Exec& ex, const Header& header)
      : ex_(ex), op_(ex.op()), n_(ex.size()), r_(ex.rank()), plan_(inline_plan(ex, header)), mine_(header),
        all_(static_cast<std::size_t>(n_)), have_(static_cast<std::size_t>(n_), false) {
    GroupImpl& g = ex.group();
    if (sends_share(ex, plan_, r_)) mine_.inline_bytes = static_cast<std::uint32_t>(plan_.bytes);
    if (is_p2p(op_.kind)) {
      peers_.push_back(op_.peer);
    } else {
      for (int p = 0; p < n_; ++p) {
        if (p != r_) peers_.push_back(p);
      }
    }
    all_[static_cast<std::size_t>(r_)] = mine_;
    have_[static_cast<std::size_t>(r_)] = true;
    // Messages out: one (the same for every peer) or one per rank; in: one per rank.
    out_len_ = sizeof(Header) + mine_.inline_bytes;
    const std::size_t out_count = plan_.same_for_all ? 1 : static_cast<std::size_t>(n_);
    in_stride_ = sizeof(Header) + (is_p2p(op_.kind) ? 0 : inline_limit(n_));
    // Collectives run one at a time and reuse the group's buffers; send and recv run on threads of
    // their own, beside them, and use their own.
    out_mem_ = is_p2p(op_.kind) ? &p2p_out_ : &g.first_out;
    in_mem_ = is_p2p(op_.kind) ? &p2p_in_ : &g.first_in;
    out_mem_->resize(std::max(out_mem_->size(), out_len_ * out_count));
    in_mem_->resize(std::max(in_mem_->size(), in_stride_ * static_cast<std::size_t>(n_)));
    for (std::size_t m = 0; m < out_count; ++m) {
      std::byte* msg = out_mem_->data() + m * out_len_;
      std::memcpy(msg, &mine_, sizeof(Header));
      if (mine_.inline_bytes > 0) write_share(ex, plan_, static_cast<int>(m), msg + sizeof(Header));
    }
    if (peers_.empty()) return;
    const std::uint64_t slot = is_p2p(op_.kind) ? (std::uint64_t{2} << 60) | op_.p2p_slot_key : kHeaderSlot;
    // One receive buffer per peer: a Gloo buffer counts completions but does not say whose they are.
    in_bufs_.resize(static_cast<std::size_t>(n_));
    for (int p : peers_) {
      auto& b = in_bufs_[static_cast<std::size_t>(p)];
      b = std::make_unique<Exec::Buffer>(ex, in_mem_->data() + static_cast<std::size_t>(p) * in_stride_, in_stride_);
      b->recv(p, slot, 0, in_stride_);
    }
    out_buf_.emplace(ex, out_mem_->data(), out_len_ * out_count);
    for (int p : peers_) out_buf_->send(p, slot, plan_.same_for_all ? 0 : static_cast<std::size_t>(p) * out_len_, out_len_);
  }

  const InlinePlan& plan() const { return plan_; }

  // Whether peer p called the same thing as this rank (waits for its header). A rank that sends
  // data before finish() sends only to peers that agree, which have posted receives of that size.
  bool agrees(int p) override {
    wait_for(p);
    const Header& h = all_[static_cast<std::size_t>(p)];
    return h.magic == mine_.magic && h.local_error[0] == '\0' && mine_.local_error[0] == '\0' &&
           same_call(h, mine_, false) && h.inline_bytes == mine_.inline_bytes;
  }

  void finish() override {
    for (int p : peers_) wait_for(p);
    for (std::size_t i = 0; i < peers_.size(); ++i) out_buf_->wait_send();
    verdict();
  }

 private:
  void wait_for(int p) {
    const auto i = static_cast<std::size_t>(p);
    if (have_[i]) return;
    in_bufs_[i]->wait_recv();
    std::memcpy(&all_[i], in_mem_->data() + i * in_stride_, sizeof(Header));
    have_[i] = true;
  }

  // Every rank now holds the same headers, so every rank reaches the same verdict and message.
  void verdict() {
    bool bad = false;
    std::vector<int> ranks = peers_;
    ranks.push_back(r_);
    std::sort(ranks.begin(), ranks.end());
    bool uneven = false;
    for (int p : ranks) uneven = uneven || all_[static_cast<std::size_t>(p)].uneven_splits != 0;
    for (int p : ranks) {
      const Header& h = all_[static_cast<std::size_t>(p)];
      if (h.magic != mine_.magic || h.local_error[0] != '\0') bad = true;
      if (is_p2p(op_.kind)) {
        const bool pair_ok = h.dtype_in == mine_.dtype_in && h.count_in == mine_.count_in &&
                             h.generation == mine_.generation && (p == r_ || (h.op != mine_.op));  // one send meets one recv
        if (!pair_ok) bad = true;
      } else if (!same_call(h, all_[static_cast<std::size_t>(ranks.front())], uneven)) {
        bad = true;
      }
    }
    // A share from every peer that should have sent one, of the size this rank expects (it follows
    // from the headers just compared; checked so that a peer's protocol error cannot be misread).
    for (int p : ranks) {
      const std::uint32_t want = sends_share(ex_, plan_, p) ? static_cast<std::uint32_t>(plan_.bytes) : 0;
      if (all_[static_cast<std::size_t>(p)].inline_bytes != want) bad = true;
    }
    if (!bad) {
      if (uneven && op_.kind == OpKind::all_to_all) check_split_tables(ex_);
      if (plan_.on) {
        const std::size_t own = plan_.same_for_all ? 0 : static_cast<std::size_t>(r_) * out_len_;
        ex_.set_shares(in_mem_->data(), in_stride_, out_mem_->data() + own + sizeof(Header));
      }
      return;
    }
    std::string lines;
    for (int p : ranks) lines += fmt::format("\n  rank {}: {}", p, header_text(all_[static_cast<std::size_t>(p)]));
    const std::string what = is_p2p(op_.kind) ? fmt::format("{} with rank {}", op_kind_name(op_.kind), op_.peer)
                                              : std::string(op_kind_name(op_.kind));
    throw DistError(DistErrorKind::mismatch, op_kind_name(op_.kind), op_.seq, {},
                    fmt::format("{} (seq {}, generation {}): ranks called it with different arguments:{}", what, op_.seq,
                                ex_.group().generation, lines));
  }

  Exec& ex_;
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
  std::vector<std::unique_ptr<Exec::Buffer>> in_bufs_;
  std::optional<Exec::Buffer> out_buf_;
};

}  // namespace

void exchange_headers(Exec& ex, const Header& header) { HeaderRound(ex, header).finish(); }

// ---- algorithms ----

void run_all_reduce(Exec& ex) {
  const OpDesc& op = ex.op();
  Tensor t = op.a;
  const DType dt = t.dtype();
  const std::int64_t count = t.numel();
  const int n = ex.size(), r = ex.rank();
  auto* data = static_cast<std::byte*>(t.data_ptr());
  if (ex.payload_arrived()) {
    // Every rank's (premultiplied) buffer came with the headers: fold them in rank order.
    if (count > 0) {
      fold_in_rank_order(data, n, [&](int p) { return ex.share_from(p); }, count, dt, combine_op_of(op.rop));
    }
    if (op.rop == ReduceOp::avg) finish_avg(data, count, dt, n);
    return;
  }
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
      fold_in_rank_order(data, n, [&](int p) { return all.data() + static_cast<std::size_t>(p) * nbytes; }, count, dt, cop);
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
  if (ex.payload_arrived()) {
    if (ex.rank() != op.peer) std::memcpy(op.a.data_ptr(), ex.share_from(op.peer), nbytes);
    return;
  }
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

void run_all_gather(Exec& ex, const Header& header) {
  const OpDesc& op = ex.op();
  const int n = ex.size(), r = ex.rank();
  HeaderRound round(ex, header);
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
  if ((n == 1 || ex.payload_arrived() || !apart) && own_dst != in) std::memmove(own_dst, in, nb);
  if (n == 1) return;
  if (ex.payload_arrived()) {
    for (int p = 0; p < n; ++p) {
      if (p != r) std::memcpy(out + static_cast<std::size_t>(p) * nb, ex.share_from(p), nb);
    }
    return;
  }
  // The data starts moving while the headers are still arriving: a separate header round first
  // would synchronise every rank before every call, which raw Gloo does not do.
  Exec::Buffer buf(ex, out, out_bytes);
  std::optional<Exec::Buffer> in_buf;
  std::optional<OwnSegment> own;
  if (apart) own.emplace(OwnSegment{in_buf.emplace(ex, in, nb), own_dst, nb});
  OwnSegment* own_ptr = own ? &*own : nullptr;
  std::vector<std::size_t> off, len;
  split_even(n, n, nb, off, len);  // one input per rank
  if (out_bytes <= direct_bytes(ex)) {
    direct_all_gather(ex, buf, off, len, ex.data_slot(0), &round, own_ptr);
  } else {
    ring_all_gather(ex, buf, off, len, op.b.itemsize(), 0, &round, own_ptr);
  }
}

void run_reduce_scatter(Exec& ex) {
  const OpDesc& op = ex.op();
  const int n = ex.size();
  const DType dt = op.a.dtype();
  const std::int64_t m = op.a.numel();
  if (m == 0) return;
  auto* out = static_cast<std::byte*>(op.a.data_ptr());
  if (ex.payload_arrived()) {
    // Every rank's (premultiplied) contribution to this rank's segment came with the headers.
    fold_in_rank_order(out, n, [&](int p) { return ex.share_from(p); }, m, dt, combine_op_of(op.rop));
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
  if (ex.payload_arrived()) {
    for (int p = 0; p < n; ++p) {
      if (p != r && from[p] > 0) std::memcpy(out + from_off[p], ex.share_from(p), from_off[p + 1] - from_off[p]);
    }
    return;
  }
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
