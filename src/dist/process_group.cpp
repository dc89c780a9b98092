// ProcessGroup's life cycle: rendezvous over the store, the worker that runs calls in order, failure
// handling (roll call, trace dump, logs), abort, and the Work handle. Shrink/reconfigure/join are in
// membership.cpp; the collectives in collectives.cpp, over the algorithms in header_round.cpp,
// direct.cpp and ring.cpp.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "lmcore/base/atomic_file.h"
#include "lmcore/base/file.h"
#include "src/dist/collectives.h"
#include "src/dist/group_impl.h"

namespace lmcore::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::product: return "product";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::premul_sum: return "premul_sum";
  }
  return "?";
}

ReduceOp reduce_op_from_name(std::string_view name) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::product, ReduceOp::min, ReduceOp::max,
                      ReduceOp::premul_sum}) {
    if (reduce_op_name(op) == name) return op;
  }
  fail("reduce_op_from_name: '{}' is not a reduce op, expected sum, avg, product, min, max or premul_sum", name);
}

namespace detail {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::broadcast: return "broadcast";
    case OpKind::all_gather: return "all_gather_single";
    case OpKind::reduce_scatter: return "reduce_scatter_single";
    case OpKind::all_to_all: return "all_to_all_single";
    case OpKind::barrier: return "barrier";
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
  }
  return "unknown";
}

namespace {

// Gloo's rendezvous talks to lmcore's store through this adapter.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<dist::Store> s, std::chrono::milliseconds timeout) : s_(std::move(s)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = s_->get(key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    if (!s_->wait(keys, std::min(timeout, timeout_))) {
      throw StoreError(fmt::format("rendezvous: peers did not publish their addresses within {} ms (store {})",
                                   std::min(timeout, timeout_).count(), s_->url()));
    }
  }

 private:
  std::shared_ptr<dist::Store> s_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

// Gloo writes to its sockets with writev(), which raises SIGPIPE when the peer has died; the default
// action would kill this rank on the spot, silently, instead of letting the collective report the dead
// peer. So the first group sets SIGPIPE to ignored, unless the program already chose a disposition.
void ignore_sigpipe_unless_handled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

std::shared_ptr<GroupImpl> make_group(const GroupConfig& o, std::shared_ptr<Store> root,
                                      std::shared_ptr<gloo::transport::Device> device, int rank, int size,
                                      int generation, std::int64_t join_consumed) {
  ignore_sigpipe_unless_handled();
  auto g = std::make_shared<GroupImpl>();
  g->config = o;
  g->root_store = root;
  g->group_store = prefix_store(root, o.name + "/");
  g->rank = rank;
  g->size = size;
  g->generation = generation;
  g->join_consumed = join_consumed;
  g->p2p_sent.assign(static_cast<std::size_t>(size), 0);
  g->p2p_recvd.assign(static_cast<std::size_t>(size), 0);
  g->recorder.set_capacity(static_cast<std::size_t>(std::max(o.trace_size, 1)));
  g->log.open_from_env(rank);
  if (!device) {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.host;
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      fail("ProcessGroup: cannot listen on '{}' (LMCORE_DIST_HOST): {}", o.host, e.what());
    }
  }
  const auto t0 = Clock::now();
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  if (size > 1) {
    ctx->setTimeout(o.connect_timeout);  // collectives pass their own deadlines to every wait
    GlooStore store(prefix_store(g->group_store, fmt::format("g{}/mesh/", generation)), o.connect_timeout);
    try {
      ctx->connectFullMesh(store, device);
    } catch (const std::exception& e) {
      throw DistError(DistErrorKind::timeout, "rendezvous", -1, {},
                      fmt::format("ProcessGroup '{}' generation {}: rank {} of {} could not connect to its peers "
                                  "within {} ms: {}",
                                  o.name, generation, rank, size, o.connect_timeout.count(), e.what()));
    }
    // No rank returns before every rank's pairs are connected. A pair is connected on one side
    // before the other has finished its handshake, so a rank that went on at once and closed its
    // connections (shrink(), abort(), a first call that failed) broke a peer's rendezvous: a
    // "connection reset" there, or Gloo's event loop aborting the peer process (getpeername on a
    // socket the peer had already closed).
    std::vector<std::string> ready;
    for (int p = 0; p < size; ++p) ready.push_back(fmt::format("g{}/ready/{}", generation, p));
    g->group_store->set(ready[static_cast<std::size_t>(rank)], "1");
    if (!g->group_store->wait(ready, o.connect_timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0))) {
      std::vector<int> late;
      for (int p = 0; p < size; ++p) {
        if (!g->group_store->check({ready[static_cast<std::size_t>(p)]})) late.push_back(p);
      }
      throw DistError(DistErrorKind::timeout, "rendezvous", -1, late,
                      fmt::format("ProcessGroup '{}' generation {}: rank {} of {} connected, but ranks [{}] did not "
                                  "finish connecting within {} ms",
                                  o.name, generation, rank, size, fmt::join(late, ", "), o.connect_timeout.count()));
    }
  }
  g->transport = std::make_unique<Transport>(device, ctx);
  g->membership = std::make_unique<Membership>(g->group_store, rank, size, generation);
  g->log.event(rank, generation, "rendezvous",
               fmt::format("world_size {} host {} store {} in {:.1f} ms", size, o.host, root->url(),
                           std::chrono::duration<double, std::milli>(Clock::now() - t0).count()));
  g->start_worker();
  return g;
}

// ---- GroupImpl ----

GroupImpl::~GroupImpl() { stop_worker(); }

void GroupImpl::start_worker() {
  worker = std::thread([this] { worker_loop(); });
  // The watcher learns of another rank's failure and releases this rank's waits.
  membership->start_watcher([this] { return last_issued(); }, [this] { transport->interrupt(); });
}

std::int64_t GroupImpl::last_issued() {
  std::lock_guard<std::mutex> lock(queue_mu);
  return next_seq - 1;
}

void GroupImpl::stop_worker() {
  std::vector<P2PThread> p2p;
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    stopping = true;
    p2p.swap(p2p_threads);
  }
  queue_cv.notify_all();
  if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
  if (membership) membership->stop_watcher();
  for (auto& t : p2p) {
    if (t.thread.get_id() == std::this_thread::get_id()) {
      t.thread.detach();  // the last owner is this very thread: it ends right after
    } else if (t.thread.joinable()) {
      t.thread.join();
    }
  }
}

void GroupImpl::prune_p2p_threads_locked() {
  for (auto it = p2p_threads.begin(); it != p2p_threads.end();) {
    bool done;
    {
      std::lock_guard<std::mutex> lock(it->work->mu);
      done = it->work->done;
    }
    if (done) {
      it->thread.join();
      it = p2p_threads.erase(it);
    } else {
      ++it;
    }
  }
}

void GroupImpl::worker_loop() {
  while (true) {
    std::shared_ptr<WorkState> w;
    {
      std::unique_lock<std::mutex> lock(queue_mu);
      queue_cv.wait(lock, [&] { return stopping || (!queue.empty() && !inline_running); });
      if (queue.empty()) return;  // stopping, and everything queued has run
      w = queue.front();
      queue.pop_front();
      worker_running = true;
    }
    execute(*w);
    {
      std::lock_guard<std::mutex> lock(queue_mu);
      worker_running = false;
    }
    queue_cv.notify_all();
  }
}

std::string GroupImpl::trace_dump(const std::string& reason, const std::string& path) const {
  TraceDump d;
  d.group = config.name;
  d.rank = rank;
  d.world_size = size;
  d.generation = generation;
  d.reason = reason;
  d.entries = recorder.snapshot();
  std::string target = path;
  if (target.empty()) {
    target = fmt::format("{}/{}-g{}-rank{}.json", config.trace_dir, config.name, generation, rank);
  }
  const std::filesystem::path p(target);
  if (p.has_parent_path()) base::create_directories(p.parent_path().string(), "dump_trace");
  // Atomic, but not durable: the dump must survive this process, not the machine, and an fsync behind
  // a busy disk could hold the error past the call's bound.
  base::write_file_atomically(target, trace_dump_to_json(d), {.what = "dump_trace", .durable = false});
  return target;
}

void GroupImpl::abort_now(const std::string& why) {
  if (aborted.exchange(true)) return;
  broken = true;
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    if (broken_reason.empty()) broken_reason = "aborted: " + why;
  }
  if (transport) transport->interrupt();
  log.event(rank, generation, "abort", why);
  try {
    trace_dump("abort", "");
  } catch (const std::exception&) {
    // a dump that cannot be written must not stop the abort
  }
}

namespace {

std::string tensor_dtype(const OpDesc& op) {
  const Tensor& t = op.b.defined() ? op.b : op.a;
  return t.defined() ? std::string(dtype_name(t.dtype())) : "";
}

std::int64_t op_bytes(const OpDesc& op) {
  const Tensor& t = op.b.defined() ? op.b : op.a;
  return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0;
}

}  // namespace

void GroupImpl::execute(WorkState& w) {
  const OpDesc& op = w.op;
  const char* name = op_kind_name(op.kind);
  const auto t0 = Clock::now();
  recorder.mark_started(w.trace_id);
  std::exception_ptr error;
  std::string status = "ok", error_text;
  std::string dump_reason;  // non-empty: write the flight recorder once the call is marked finished
  GiveWay way;              // a copy: give_way_to() may change the group's meanwhile
  std::string where = is_p2p(op.kind) ? fmt::format("{} {} rank {} (#{}", name, op.kind == OpKind::send ? "to" : "from",
                                                     op.peer, op.seq)
                                      : fmt::format("{} (seq {}", name, op.seq);
  where += fmt::format(", generation {}, rank {} of {})", generation, rank, size);
  try {
    if (broken.load()) {
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(queue_mu);
        reason = broken_reason;
      }
      throw DistError(aborted.load() ? DistErrorKind::aborted : DistErrorKind::broken, name, op.seq, {},
                      fmt::format("{}: the group is unusable ({}); call shrink() or reconfigure()", where, reason));
    }
    // send and recv run beside the collectives, on threads of their own: they bring their own scratch.
    CallScratch p2p_scratch;
    CallContext ctx(*transport, op, config, generation, is_p2p(op.kind) ? p2p_scratch : scratch);
    if (!is_p2p(op.kind)) {
      std::lock_guard<std::mutex> lock(queue_mu);
      way = give_way;
    }
    ctx.set_give_way(&way);
    if (Clock::now() >= op.deadline) throw DeadlineSignal{};
    const Header header = make_header(ctx);
    if (op.kind != OpKind::all_gather) HeaderRound::run(ctx, header);  // all_gather overlaps it with its data
    switch (op.kind) {
      case OpKind::all_reduce: run_all_reduce(ctx); break;
      case OpKind::broadcast: run_broadcast(ctx); break;
      case OpKind::all_gather: run_all_gather(ctx, header); break;
      case OpKind::reduce_scatter: run_reduce_scatter(ctx); break;
      case OpKind::all_to_all: run_all_to_all(ctx); break;
      case OpKind::barrier: break;  // the header exchange is the barrier
      case OpKind::send: run_send(ctx); break;
      case OpKind::recv: run_recv(ctx); break;
    }
  } catch (const DistError& e) {
    error = std::current_exception();
    status = e.kind() == DistErrorKind::mismatch ? "mismatch" : "failed";
    error_text = e.what();
  } catch (...) {
    // A transport failure, a deadline, or abort(): the connections are no longer trustworthy.
    DistErrorKind kind;
    std::string cause;
    try {
      throw;
    } catch (const AbortedSignal&) {
      kind = DistErrorKind::aborted;
    } catch (const DeadlineSignal&) {
      kind = DistErrorKind::timeout;
    } catch (const std::exception& e) {
      cause = e.what();
      kind = aborted.load() ? DistErrorKind::aborted
             : Clock::now() + std::chrono::milliseconds(5) >= op.deadline ? DistErrorKind::timeout
                                                                         : DistErrorKind::peer_failure;
    }
    if (aborted.load()) {
      kind = DistErrorKind::aborted;
    } else if (membership->failure_posted() && kind == DistErrorKind::aborted) {
      kind = DistErrorKind::peer_failure;
      cause = "another rank reported a failure of this generation through the store";
    }
    if (kind != DistErrorKind::aborted) {
      // Answer the roll call, and tell the ranks whose own connections still look fine (their
      // watchers), before closing the connections: a peer that sees them close then finds this
      // rank's answer in the store already (see Membership::roll_call). An unreachable store is
      // reported by the roll call.
      try {
        membership->report_failure(op.seq);
      } catch (const std::exception&) {
      }
    }
    mark_broken(kind == DistErrorKind::aborted ? "aborted" : std::string(name) + " failed");
    std::string msg;
    std::vector<int> missing;
    if (kind == DistErrorKind::aborted) {
      msg = fmt::format("{}: aborted", where);
    } else {
      std::string note;
      const auto roll_start = Clock::now();
      missing = membership->roll_call(op, kind == DistErrorKind::peer_failure, &note);
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - roll_start);
      const std::string what = kind == DistErrorKind::timeout
                                   ? fmt::format("timed out after {} ms", op.timeout.count())
                                   : fmt::format("a connection failed ({})", cause);
      msg = fmt::format("{}: {}; ranks that did not reach it or answer the roll call within {} ms: [{}]{}", where,
                        what, waited.count(), fmt::join(missing, ", "), note);
    }
    error_text = msg;
    status = kind == DistErrorKind::aborted ? "aborted" : kind == DistErrorKind::timeout ? "timeout" : "peer_failure";
    error = std::make_exception_ptr(DistError(kind, name, op.seq, missing, msg));
    dump_reason = status;
  }
  // Before the dump: a dump written because of this failure must show it as failed, with its error.
  recorder.mark_finished(w.trace_id, error == nullptr, error_text);
  if (!dump_reason.empty()) {
    try {
      trace_dump(dump_reason, "");
    } catch (const std::exception&) {
    }
  }
  if (log.enabled()) {
    LogRecord r;
    r.rank = rank;
    r.generation = generation;
    r.seq = op.seq;
    r.op = name;
    r.dtype = tensor_dtype(op);
    r.bytes = op_bytes(op);
    r.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    r.status = status;
    r.error = error_text;
    r.peer = is_p2p(op.kind) || op.kind == OpKind::broadcast ? op.peer : -1;
    log.write(r);
  }
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.done = true;
    w.error = error;
  }
  w.cv.notify_all();
}

void GroupImpl::mark_broken(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    if (broken_reason.empty()) broken_reason = why;
  }
  broken = true;
  // Closing every pair tells the peers at once, so their calls fail now instead of at their deadline.
  if (transport) transport->close();
}

}  // namespace detail

// ---- Work ----

using detail::Clock;

bool Work::is_completed() const {
  LMCORE_CHECK(state_ != nullptr, "Work::is_completed: empty Work");
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void Work::wait() const {
  LMCORE_CHECK(state_ != nullptr, "Work::wait: empty Work");
  detail::Activity::Waiting waiting(*group_->activity);
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

void Work::wait(std::chrono::milliseconds timeout) const {
  LMCORE_CHECK(state_ != nullptr, "Work::wait: empty Work");
  std::optional<detail::Activity::Waiting> waiting(std::in_place, *group_->activity);
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    lock.unlock();
    waiting.reset();
    const char* name = detail::op_kind_name(state_->op.kind);
    group_->abort_now(fmt::format("Work.wait({} ms) on {} seq {} timed out", timeout.count(), name, state_->op.seq));
    throw DistError(DistErrorKind::timeout, name, state_->op.seq, {},
                    fmt::format("{} (seq {}, generation {}, rank {} of {}): Work.wait timed out after {} ms; the group "
                                "was aborted",
                                name, state_->op.seq, group_->generation, group_->rank, group_->size, timeout.count()));
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

// ---- ProcessGroup ----

ProcessGroup::ProcessGroup(std::shared_ptr<detail::GroupImpl> impl) : impl_(std::move(impl)) {}

ProcessGroup::ProcessGroup(GroupOptions options) {
  const auto [rank, world_size] = detail::rank_and_world_size(options);
  const detail::GroupConfig config = detail::GroupConfig::resolve(options);
  auto store = open_store(config.store_url, std::chrono::milliseconds(1000));
  impl_ = detail::make_group(config, store, nullptr, rank, world_size, 0, 0);
}

ProcessGroup::~ProcessGroup() = default;
ProcessGroup::ProcessGroup(ProcessGroup&&) noexcept = default;
ProcessGroup& ProcessGroup::operator=(ProcessGroup&&) noexcept = default;

int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::world_size() const { return impl_->size; }
int ProcessGroup::generation() const { return impl_->generation; }
std::chrono::milliseconds ProcessGroup::timeout() const { return impl_->config.call_timeout(); }
void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) { impl_->config.set_call_timeout(timeout); }
bool ProcessGroup::is_broken() const { return impl_->broken.load(); }
void* ProcessGroup::gloo_context() const { return impl_->transport->gloo_context(); }

void ProcessGroup::abort() { impl_->abort_now("abort() called"); }

void ProcessGroup::give_way_to(const ProcessGroup& other, std::size_t piece_bytes) {
  LMCORE_CHECK(other.impl_ != impl_, "give_way_to: group '{}' cannot give way to itself", impl_->config.name);
  LMCORE_CHECK(piece_bytes >= 4096, "give_way_to: piece_bytes {} must be at least 4096", piece_bytes);
  {
    std::lock_guard<std::mutex> lock(other.impl_->queue_mu);
    for (const auto& a : other.impl_->give_way.to) {
      LMCORE_CHECK(a != impl_->activity, "give_way_to: group '{}' already gives way to '{}'; two groups that wait "
                   "for each other would never send", other.impl_->config.name, impl_->config.name);
    }
  }
  std::lock_guard<std::mutex> lock(impl_->queue_mu);
  auto& to = impl_->give_way.to;
  if (std::find(to.begin(), to.end(), other.impl_->activity) == to.end()) to.push_back(other.impl_->activity);
  impl_->give_way.piece_bytes = piece_bytes;
}

std::string ProcessGroup::trace_json() const {
  TraceDump d;
  d.group = impl_->config.name;
  d.rank = impl_->rank;
  d.world_size = impl_->size;
  d.generation = impl_->generation;
  d.reason = "request";
  d.entries = impl_->recorder.snapshot();
  return trace_dump_to_json(d);
}

std::string ProcessGroup::dump_trace(const std::string& path) const { return impl_->trace_dump("request", path); }

namespace {
// Set by the blocking wrappers around the async calls: the call may run on the caller's thread.
thread_local bool tl_blocking_call = false;
struct BlockingScope {
  BlockingScope() { tl_blocking_call = true; }
  ~BlockingScope() { tl_blocking_call = false; }
};
}  // namespace

Work ProcessGroup::enqueue(std::shared_ptr<detail::WorkState> state) {
  detail::GroupImpl& g = *impl_;
  const bool blocking = tl_blocking_call;
  tl_blocking_call = false;
  bool run_here = false;
  detail::OpDesc& op = state->op;
  op.timeout = g.config.timeout_for(op.timeout);
  op.deadline = Clock::now() + op.timeout;
  {
    std::lock_guard<std::mutex> lock(g.queue_mu);
    if (detail::is_p2p(op.kind)) {
      LMCORE_CHECK(op.peer >= 0 && op.peer < g.size && op.peer != g.rank,
                   "{}: peer rank {} must be in [0, {}) and differ from this rank {}", detail::op_kind_name(op.kind),
                   op.peer, g.size, g.rank);
      const bool to_peer = op.kind == detail::OpKind::send;
      auto& counter = to_peer ? g.p2p_sent[static_cast<std::size_t>(op.peer)] : g.p2p_recvd[static_cast<std::size_t>(op.peer)];
      op.seq = static_cast<std::int64_t>(counter++);  // numbers the pair's messages (Slot::p2p_*)
    } else {
      op.seq = g.next_seq++;
    }
    TraceEntry e;
    e.seq = op.seq;
    e.op = detail::op_kind_name(op.kind);
    e.kind = detail::is_p2p(op.kind) ? "p2p" : "collective";
    e.peer = op.peer;
    const Tensor& in = op.b.defined() ? op.b : op.a;
    if (in.defined()) {
      e.dtype = dtype_name(in.dtype());
      e.count_in = in.numel();
      e.bytes = static_cast<std::int64_t>(in.nbytes());
    }
    if (op.a.defined()) e.count_out = op.a.numel();
    e.state = "scheduled";
    e.t_enqueue = detail::wall_seconds();
    state->trace_id = g.recorder.record(std::move(e));
    if (detail::is_p2p(op.kind)) {
      // Each send/recv runs on its own thread: a ring of blocking sends followed by receives must
      // make progress, and Gloo only moves a send's data once the peer has posted the receive.
      g.prune_p2p_threads_locked();
      g.p2p_threads.push_back({state, std::thread([impl = impl_, state] { impl->execute(*state); })});
    } else if (blocking && g.queue.empty() && !g.worker_running && !g.inline_running) {
      run_here = true;  // nothing ahead of it: skip the hand-off to the worker (two thread wake-ups)
      g.inline_running = true;
    } else {
      g.queue.push_back(state);
    }
  }
  if (run_here) {
    detail::Activity::Waiting waiting(*g.activity);  // the caller waits for it, here
    g.execute(*state);
    std::lock_guard<std::mutex> lock(g.queue_mu);
    g.inline_running = false;
  }
  g.queue_cv.notify_all();
  Work w;
  w.state_ = std::move(state);
  w.group_ = impl_;
  return w;
}

namespace {

std::shared_ptr<detail::WorkState> make_op(detail::OpKind kind, Tensor a, Tensor b, std::chrono::milliseconds timeout) {
  auto s = std::make_shared<detail::WorkState>();
  s->op.kind = kind;
  s->op.a = std::move(a);
  s->op.b = std::move(b);
  s->op.timeout = timeout;
  return s;
}

}  // namespace

Work ProcessGroup::all_reduce_async(Tensor tensor, const ReduceOptions& options) {
  auto s = make_op(detail::OpKind::all_reduce, std::move(tensor), Tensor(), options.timeout);
  s->op.rop = options.op;
  s->op.factor = options.premul_factor;
  return enqueue(std::move(s));
}
Work ProcessGroup::broadcast_async(Tensor tensor, int root, const CallOptions& options) {
  auto s = make_op(detail::OpKind::broadcast, std::move(tensor), Tensor(), options.timeout);
  s->op.peer = root;
  return enqueue(std::move(s));
}
Work ProcessGroup::all_gather_single_async(Tensor output, Tensor input, const CallOptions& options) {
  return enqueue(make_op(detail::OpKind::all_gather, std::move(output), std::move(input), options.timeout));
}
Work ProcessGroup::reduce_scatter_single_async(Tensor output, Tensor input, const ReduceOptions& options) {
  auto s = make_op(detail::OpKind::reduce_scatter, std::move(output), std::move(input), options.timeout);
  s->op.rop = options.op;
  s->op.factor = options.premul_factor;
  return enqueue(std::move(s));
}
Work ProcessGroup::all_to_all_single_async(Tensor output, Tensor input, const CallOptions& options) {
  return enqueue(make_op(detail::OpKind::all_to_all, std::move(output), std::move(input), options.timeout));
}
Work ProcessGroup::all_to_all_single_async(Tensor output, Tensor input, const AllToAllOptions& options) {
  auto s = make_op(detail::OpKind::all_to_all, std::move(output), std::move(input), options.timeout);
  s->op.output_split_rows = options.output_split_sizes;
  s->op.input_split_rows = options.input_split_sizes;
  return enqueue(std::move(s));
}
Work ProcessGroup::barrier_async(const CallOptions& options) {
  return enqueue(make_op(detail::OpKind::barrier, Tensor(), Tensor(), options.timeout));
}
Work ProcessGroup::send_async(Tensor tensor, int dst, const CallOptions& options) {
  auto s = make_op(detail::OpKind::send, std::move(tensor), Tensor(), options.timeout);
  s->op.peer = dst;
  return enqueue(std::move(s));
}
Work ProcessGroup::recv_async(Tensor tensor, int src, const CallOptions& options) {
  auto s = make_op(detail::OpKind::recv, std::move(tensor), Tensor(), options.timeout);
  s->op.peer = src;
  return enqueue(std::move(s));
}

void ProcessGroup::all_reduce(Tensor& tensor, const ReduceOptions& options) {
  BlockingScope scope;
  all_reduce_async(tensor, options).wait(); }
void ProcessGroup::broadcast(Tensor& tensor, int root, const CallOptions& options) {
  BlockingScope scope;
  broadcast_async(tensor, root, options).wait();
}
void ProcessGroup::all_gather_single(Tensor& output, const Tensor& input, const CallOptions& options) {
  BlockingScope scope;
  all_gather_single_async(output, input, options).wait();
}
void ProcessGroup::reduce_scatter_single(Tensor& output, const Tensor& input, const ReduceOptions& options) {
  BlockingScope scope;
  reduce_scatter_single_async(output, input, options).wait();
}
void ProcessGroup::all_to_all_single(Tensor& output, const Tensor& input, const CallOptions& options) {
  BlockingScope scope;
  all_to_all_single_async(output, input, options).wait();
}
void ProcessGroup::all_to_all_single(Tensor& output, const Tensor& input, const AllToAllOptions& options) {
  BlockingScope scope;
  all_to_all_single_async(output, input, options).wait();
}
void ProcessGroup::barrier(const CallOptions& options) {
  BlockingScope scope;
  barrier_async(options).wait(); }
void ProcessGroup::send(const Tensor& tensor, int dst, const CallOptions& options) {
  send_async(tensor, dst, options).wait();
}
void ProcessGroup::recv(Tensor& tensor, int src, const CallOptions& options) { recv_async(tensor, src, options).wait(); }

void ProcessGroup::all_gather_into_tensor(Tensor& output, const Tensor& input, const CallOptions& options) {
  detail::warn_deprecated_once("all_gather_into_tensor", "all_gather_single");
  all_gather_single(output, input, options);
}
void ProcessGroup::reduce_scatter_tensor(Tensor& output, const Tensor& input, const ReduceOptions& options) {
  detail::warn_deprecated_once("reduce_scatter_tensor", "reduce_scatter_single");
  reduce_scatter_single(output, input, options);
}

}  // namespace lmcore::dist
