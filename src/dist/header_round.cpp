// The header round (see header_round.h): headers and small payloads out and in, the verdict, and the
// check of all_to_all_single's split tables.
#include "src/dist/header_round.h"

#include <algorithm>
#include <cstring>

#include "src/dist/direct.h"

namespace lmcore::dist::detail {

namespace {

std::string header_text(const Header& h) {
  std::string s = fmt::format("{} {}", op_kind_name(static_cast<OpKind>(h.op)), dtype_name(static_cast<DType>(h.dtype_in)));
  const auto kind = static_cast<OpKind>(h.op);
  if (kind == OpKind::all_reduce || kind == OpKind::reduce_scatter) {
    s += fmt::format(" op={}", reduce_op_name(static_cast<ReduceOp>(h.rop)));
  }
  if (kind == OpKind::broadcast) s += fmt::format(" root={}", h.root);
  s += fmt::format(" in={} out={} elements (seq {}, generation {}; direct_max_bytes {}, ring_chunk_bytes {})",
                   h.count_in, h.count_out, h.seq, h.generation, h.direct_max_bytes, h.ring_chunk_bytes);
  if (h.give_way_bytes != 0) s += fmt::format(" giving way in pieces of {} bytes", h.give_way_bytes);
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
         a.direct_max_bytes == b.direct_max_bytes && a.ring_chunk_bytes == b.ring_chunk_bytes &&
         a.give_way_bytes == b.give_way_bytes;
}

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

}  // namespace

Header make_header(const CallContext& ctx) {
  const OpDesc& op = ctx.op();
  Header h;
  h.generation = static_cast<std::uint32_t>(ctx.generation());
  h.seq = op.seq;
  h.op = static_cast<std::uint8_t>(op.kind);
  h.rop = static_cast<std::uint8_t>(op.rop);
  h.root = op.kind == OpKind::broadcast ? op.peer : -1;
  h.direct_max_bytes = ctx.config().direct_max_bytes;
  h.ring_chunk_bytes = ctx.config().ring_chunk_bytes;
  h.give_way_bytes = ctx.give_way().piece_bytes;
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
  const int n = ctx.size();
  if (op.kind != OpKind::barrier) {
    if (!op.a.defined() || (!op.b.defined() && (op.kind == OpKind::all_gather || op.kind == OpKind::reduce_scatter ||
                                                op.kind == OpKind::all_to_all))) {
      err = "tensor is undefined";
    } else if (!op.a.is_contiguous() || (op.b.defined() && !op.b.is_contiguous())) {
      err = "tensor is not contiguous";
    } else if (op.a.is_read_only() && op.kind != OpKind::send &&
               !(op.kind == OpKind::broadcast && op.peer == ctx.rank())) {
      // A view of memory that must not change (from_numpy of a writeable=False array): found here, the
      // error reaches every rank instead of a write into it (or a segfault on a read-only mapping).
      err = "the output tensor is read-only";
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
void check_split_tables(CallContext& ctx) {
  const OpDesc& op = ctx.op();
  const int n = ctx.size(), r = ctx.rank();
  const std::size_t row = 2 * static_cast<std::size_t>(n);  // [to rank 0..n-1, from rank 0..n-1]
  std::vector<std::int64_t> table(row * static_cast<std::size_t>(n));
  const auto to = all_to_all_split_elements(op, n, true), from = all_to_all_split_elements(op, n, false);
  std::copy(to.begin(), to.end(), table.begin() + static_cast<std::ptrdiff_t>(row * r));
  std::copy(from.begin(), from.end(), table.begin() + static_cast<std::ptrdiff_t>(row * r + n));
  if (n > 1) {  // a group of one has no transport to gather over (a buffer on it crashed in Gloo)
    CallContext::Buffer buf(ctx, table.data(), table.size() * sizeof(std::int64_t));
    const Segments rows = Segments::even(n, n, row * sizeof(std::int64_t));  // one row per rank
    DirectAllGather(ctx, buf, rows, ctx.slot(Slot::split_table)).run();
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
                                  op.seq, ctx.generation(), a, sends, b, expects, lines));
    }
  }
}

// The first round can carry the payload itself when each peer's share is at most inline_limit(n)
// (and the group's inline_max_bytes) and the call would take a one-round direct path anyway (so
// direct_max_bytes still decides: 0 forces the rings). Then a collective costs one latency, as in
// Gloo, instead of a header round followed by a payload round. Every receive is posted for a header
// plus inline_limit(n), whatever this rank expects (or its inline_max_bytes), so a peer that
// disagrees (and so sends more or less) still lands inside the buffer; the headers then disagree and
// no rank uses a payload.
//
// The limit shares about 4 MiB of receive buffer among the peers, between 256 KiB and 1 MiB each:
// with 4 ranks a 4 MiB all_gather_single then travels in one message per peer, which measured
// about 0.8 of Gloo's ring allgather as a header round plus a data round (see bench comm).
constexpr std::size_t kInlineBudget = 4u << 20, kMinInline = 256u << 10, kMaxInline = 1u << 20;
std::size_t inline_limit(int n) {
  return std::clamp<std::size_t>(kInlineBudget / static_cast<std::size_t>(std::max(n - 1, 1)), kMinInline, kMaxInline);
}

InlinePlan inline_plan(const CallContext& ctx, const Header& mine) {
  InlinePlan plan;
  const OpDesc& op = ctx.op();
  const std::size_t n = static_cast<std::size_t>(ctx.size()), direct = ctx.config().direct_max_bytes;
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
  plan.on = plan.on && plan.bytes <= std::min(inline_limit(ctx.size()), ctx.config().inline_max_bytes);
  return plan;
}

// Whether `sender` puts a share in its first-round messages under `plan` (a broadcast: the root only).
bool sends_share(const CallContext& ctx, const InlinePlan& plan, int sender) {
  return plan.on && (ctx.op().kind != OpKind::broadcast || sender == ctx.op().peer);
}

// This rank's share for `peer` (for reduce_scatter and all_reduce also its own contribution, with
// premul_sum's factor applied, so that the fold takes every contribution from the same place).
void write_share(const CallContext& ctx, const InlinePlan& plan, int peer, std::byte* dst) {
  const OpDesc& op = ctx.op();
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

}  // namespace

HeaderRound::HeaderRound(CallContext& ctx, const Header& header)
    : ctx_(ctx), op_(ctx.op()), n_(ctx.size()), r_(ctx.rank()), plan_(inline_plan(ctx, header)), mine_(header),
      all_(static_cast<std::size_t>(n_)), have_(static_cast<std::size_t>(n_), false) {
  // 1. This rank's message (or one per peer, when each gets its own share): header, then payload.
  if (sends_share(ctx, plan_, r_)) mine_.inline_bytes = static_cast<std::uint32_t>(plan_.bytes);
  if (is_p2p(op_.kind)) {
    peers_.push_back(op_.peer);
  } else {
    for (int p = 0; p < n_; ++p) {
      if (p != r_) peers_.push_back(p);
    }
  }
  all_[static_cast<std::size_t>(r_)] = mine_;
  have_[static_cast<std::size_t>(r_)] = true;
  out_len_ = sizeof(Header) + mine_.inline_bytes;
  const std::size_t out_count = plan_.same_for_all ? 1 : static_cast<std::size_t>(n_);
  // Every receive has room for a header plus inline_limit(n), whatever this rank expects, so that a
  // peer that disagrees (and so sends more or less) still lands inside it.
  in_stride_ = sizeof(Header) + (is_p2p(op_.kind) ? 0 : inline_limit(n_));
  // Collectives run one at a time and reuse the group's buffers; send and recv run on threads of
  // their own, beside them, and use their own.
  out_mem_ = is_p2p(op_.kind) ? &p2p_out_ : &ctx.scratch().first_out;
  in_mem_ = is_p2p(op_.kind) ? &p2p_in_ : &ctx.scratch().first_in;
  out_mem_->resize(std::max(out_mem_->size(), out_len_ * out_count));
  in_mem_->resize(std::max(in_mem_->size(), in_stride_ * static_cast<std::size_t>(n_)));
  for (std::size_t m = 0; m < out_count; ++m) {
    std::byte* msg = out_mem_->data() + m * out_len_;
    std::memcpy(msg, &mine_, sizeof(Header));
    if (mine_.inline_bytes > 0) write_share(ctx, plan_, static_cast<int>(m), msg + sizeof(Header));
  }
  if (peers_.empty()) return;
  const std::uint64_t slot = ctx.slot(is_p2p(op_.kind) ? Slot::p2p_header : Slot::header);
  // 2. One receive buffer per peer (a Gloo buffer counts completions but does not say whose they
  //    are), then the sends.
  in_bufs_.resize(static_cast<std::size_t>(n_));
  for (int p : peers_) {
    auto& b = in_bufs_[static_cast<std::size_t>(p)];
    b = std::make_unique<CallContext::Buffer>(ctx, in_mem_->data() + static_cast<std::size_t>(p) * in_stride_, in_stride_);
    b->recv(p, slot, 0, in_stride_);
  }
  out_buf_.emplace(ctx, out_mem_->data(), out_len_ * out_count);
  for (int p : peers_) out_buf_->send(p, slot, plan_.same_for_all ? 0 : static_cast<std::size_t>(p) * out_len_, out_len_);
}

bool HeaderRound::agrees(int p) {
  wait_for(p);
  const Header& h = all_[static_cast<std::size_t>(p)];
  return h.magic == mine_.magic && h.local_error[0] == '\0' && mine_.local_error[0] == '\0' &&
         same_call(h, mine_, false) && h.inline_bytes == mine_.inline_bytes;
}

void HeaderRound::finish() {
  // 3. Every peer's header, and this rank's sends, complete.
  for (int p : peers_) wait_for(p);
  for (std::size_t i = 0; i < peers_.size(); ++i) out_buf_->wait_send();
  // 4. The same verdict on every rank.
  verdict();
}

void HeaderRound::wait_for(int p) {
  const auto i = static_cast<std::size_t>(p);
  if (have_[i]) return;
  in_bufs_[i]->wait_recv();
  std::memcpy(&all_[i], in_mem_->data() + i * in_stride_, sizeof(Header));
  have_[i] = true;
}

void HeaderRound::verdict() {
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
    const std::uint32_t want = sends_share(ctx_, plan_, p) ? static_cast<std::uint32_t>(plan_.bytes) : 0;
    if (all_[static_cast<std::size_t>(p)].inline_bytes != want) bad = true;
  }
  if (!bad) {
    if (uneven && op_.kind == OpKind::all_to_all) check_split_tables(ctx_);
    if (plan_.on) {
      const std::size_t own = plan_.same_for_all ? 0 : static_cast<std::size_t>(r_) * out_len_;
      ctx_.set_shares(in_mem_->data(), in_stride_, sizeof(Header), out_mem_->data() + own + sizeof(Header));
    }
    return;
  }
  std::string lines;
  for (int p : ranks) lines += fmt::format("\n  rank {}: {}", p, header_text(all_[static_cast<std::size_t>(p)]));
  const std::string what = is_p2p(op_.kind) ? fmt::format("{} with rank {}", op_kind_name(op_.kind), op_.peer)
                                            : std::string(op_kind_name(op_.kind));
  throw DistError(DistErrorKind::mismatch, op_kind_name(op_.kind), op_.seq, {},
                  fmt::format("{} (seq {}, generation {}): ranks called it with different arguments:{}", what, op_.seq,
                              ctx_.generation(), lines));
}

}  // namespace lmcore::dist::detail
