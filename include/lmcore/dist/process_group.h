// lmcore/dist/process_group.h — collectives over Gloo's TCP transport, with bounded waits and
// partial-group recovery.
//
// A ProcessGroup is `world_size` processes that reached each other through a Store (file:// on one
// machine, redis:// across machines). Every collective takes contiguous tensors of any dtype and
// comes in a blocking form and an async form returning a Work:
//
//   auto pg = lmcore::dist::ProcessGroup::from_env();     // LMCORE_RANK, LMCORE_WORLD_SIZE, LMCORE_STORE
//   Tensor g = ...;                                       // gradients
//   pg.all_reduce(g, {.op = ReduceOp::avg});
//   Tensor shard = Tensor::empty({n / pg.world_size()}, DType::f32);
//   pg.reduce_scatter_single(shard, g);                   // a real ring: (n-1)/n of the data per rank
//   Work w = pg.all_gather_single_async(g, shard);
//   w.wait(std::chrono::seconds(10));
//
// Guarantees:
//  * Each collective first exchanges a small header with every peer (op, dtype, element count,
//    reduce op, root, sequence number). Any disagreement is reported as a DistError on every rank,
//    naming each rank's view, before any payload moves: never a hang, never wrong data.
//  * No call blocks past its timeout (per group, overridable per call). When a peer dies or stops
//    answering, every survivor gets a DistError naming the op, its sequence number and the ranks that
//    did not reach the call or answer a roll call through the store: within about 0.3 s of a
//    connection reset (a peer killed), within timeout + 1 s when a peer goes silent.
//  * abort() from any thread releases blocked calls (they throw DistError, kind aborted).
//  * After a failure the group is broken; survivors call shrink() (or reconfigure(), which also
//    admits restarted ranks that called join()) to get a new group with ranks renumbered in order of
//    their old ranks and a new generation, whose store keys and connections are separate from the
//    old ones.
//  * Every call is recorded in a flight recorder (the last N collectives), dumped to JSON on timeout,
//    on abort, or by dump_trace(); `lmcore trace` compares the dumps of all ranks. With
//    LMCORE_DIST_LOG set, each call also writes one JSON line (see dist_log in src/dist).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "lmcore/core/error.h"
#include "lmcore/core/tensor.h"
#include "lmcore/dist/store.h"

namespace lmcore::dist {

enum class ReduceOp : std::uint8_t {
  sum = 0,
  avg = 1,         // sum / world_size (integers: truncated toward zero)
  product = 2,
  min = 3,
  max = 4,
  premul_sum = 5,  // sum of (factor * x): the factor is applied locally before the sum
};
std::string_view reduce_op_name(ReduceOp op);
ReduceOp reduce_op_from_name(std::string_view name);  // "sum", "avg", "product", "min", "max", "premul_sum"

// What went wrong in a collective; every DistError carries the op and sequence number.
enum class DistErrorKind : std::uint8_t {
  mismatch = 0,   // ranks called with different ops, sizes or dtypes (the group stays usable)
  timeout = 1,    // the call's deadline passed
  peer_failure = 2,  // a connection broke (a peer died, or another rank gave up)
  aborted = 3,    // abort() was called
  broken = 4,     // the group failed earlier: shrink() or reconfigure() it
};

class DistError : public Error {
 public:
  DistError(DistErrorKind kind, std::string op, std::int64_t seq, std::vector<int> missing, std::string message)
      : Error(std::move(message)), kind_(kind), op_(std::move(op)), seq_(seq), missing_(std::move(missing)) {}
  DistErrorKind kind() const { return kind_; }
  const std::string& op() const { return op_; }
  std::int64_t seq() const { return seq_; }
  // Ranks (of the failed group) that did not answer the roll call; empty when all did.
  const std::vector<int>& missing_ranks() const { return missing_; }

 private:
  DistErrorKind kind_;
  std::string op_;
  std::int64_t seq_;
  std::vector<int> missing_;
};

struct GroupOptions {
  int rank = -1;            // -1: LMCORE_RANK
  int world_size = -1;      // -1: LMCORE_WORLD_SIZE
  std::string store_url;    // empty: LMCORE_STORE
  std::string name = "pg";  // key prefix: several groups can share one store
  std::chrono::milliseconds timeout{30000};  // default per-call timeout (LMCORE_DIST_TIMEOUT_MS)
  // How long rendezvous (construction, shrink, reconfigure, join) waits for the peers to connect
  // (LMCORE_DIST_CONNECT_TIMEOUT_MS): ranks of one job start seconds apart.
  std::chrono::milliseconds connect_timeout{120000};
  // Address Gloo listens on. Empty: LMCORE_DIST_HOST, else 127.0.0.1 for a file store, else the
  // local address that routes to the Redis host.
  std::string host;
  // Algorithm choice (defaults measured by `lmcore bench comm`). Up to direct_max_bytes of the full
  // buffer, all_gather_single, reduce_scatter_single and all_reduce send each block straight to the
  // rank that needs it (one latency; up to 1 MiB per peer, 256 KiB from 17 ranks, it travels in
  // the same message as the call's header); above, they run rings whose segments are pipelined in
  // pieces of about ring_chunk_bytes (at least two pieces per segment from 256 KiB).
  std::size_t direct_max_bytes = 4096 * 1024;
  std::size_t ring_chunk_bytes = 4096 * 1024;
  // At most this many payload bytes per peer travel in the header's message (below the built-in
  // limit above). There they cost a copy into the message and one out of it; 0 keeps the payload
  // apart: it lands straight in the output and leaves straight from the input, one round later.
  // For calls that bandwidth bounds, not latency (sharded training: fsdp::group_options_for).
  std::size_t inline_max_bytes = std::numeric_limits<std::size_t>::max();
  int trace_size = 256;     // flight recorder entries (LMCORE_DIST_TRACE_SIZE)
  std::string trace_dir;    // where dumps go (LMCORE_DIST_TRACE_DIR; default $TMPDIR/lmcore-trace)
};

// Per-call options. timeout 0 = the group's timeout.
struct CallOptions {
  std::chrono::milliseconds timeout{0};
};
struct ReduceOptions {
  ReduceOp op = ReduceOp::sum;
  double premul_factor = 1.0;  // for premul_sum
  std::chrono::milliseconds timeout{0};
};
// all_to_all_single's split sizes along dim 0, as in torch: input_split_sizes[j] rows of the input
// go to rank j, output_split_sizes[j] rows of the output come from rank j. Empty: equal splits.
// Rank r's input_split_sizes[j] must equal rank j's output_split_sizes[r]; checked on every rank.
struct AllToAllOptions {
  std::vector<std::int64_t> output_split_sizes;
  std::vector<std::int64_t> input_split_sizes;
  std::chrono::milliseconds timeout{0};
};
struct ShrinkOptions {
  // How long survivors wait for each other before deciding who is alive. After a failure only the
  // ranks that answered its roll call are waited for (a dead rank costs no wait); otherwise all are.
  std::chrono::milliseconds window{3000};
  // reconfigure(): wait (within the window) until at least this many restarted ranks have asked to
  // join. shrink() admits none.
  int min_joiners = 0;
};

class ProcessGroup;
namespace detail {
struct GroupImpl;
struct WorkState;
}  // namespace detail

// The handle of an async collective. wait() rethrows the collective's error.
class Work {
 public:
  Work() = default;
  bool is_completed() const;
  // Blocks until done; the collective's own deadline bounds the wait.
  void wait() const;
  // Blocks at most `timeout`. When it passes first, throws DistError (timeout) and aborts the group,
  // since the collective still owns its buffers.
  void wait(std::chrono::milliseconds timeout) const;

 private:
  friend class ProcessGroup;
  std::shared_ptr<detail::WorkState> state_;
  std::shared_ptr<detail::GroupImpl> group_;
};

// For bindings that report deprecations their own way (Python: the warnings module): true the first
// time `old_name` is claimed or warned about in this process, and the caller then warns; false
// after. Once a name is claimed, the C++ alias of that name stays silent.
bool claim_deprecation_warning(std::string_view old_name);

// The first group created in a process sets SIGPIPE to ignored if it still has the default action:
// a write to a dead peer must become an error of the collective, not kill the rank silently.
class ProcessGroup {
 public:
  // Rank, world size and store from GroupOptions, falling back to the LMCORE_* environment.
  explicit ProcessGroup(GroupOptions options);
  static ProcessGroup from_env() { return ProcessGroup(GroupOptions{}); }
  // For a restarted rank: asks to join the group named in `options` and blocks until the members'
  // next reconfigure() admits it (or `wait` passes). options.rank and world_size are ignored.
  static ProcessGroup join(GroupOptions options, std::chrono::milliseconds wait = std::chrono::seconds(60));

  ~ProcessGroup();
  ProcessGroup(ProcessGroup&&) noexcept;
  ProcessGroup& operator=(ProcessGroup&&) noexcept;

  int rank() const;
  int world_size() const;
  int generation() const;
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);
  bool is_broken() const;  // a collective failed or abort() was called

  // ---- collectives: blocking ----
  void all_reduce(Tensor& tensor, const ReduceOptions& options = {});
  void broadcast(Tensor& tensor, int root, const CallOptions& options = {});
  // output = [world_size * input.size(0), ...]: rank r's input lands at rows [r*n, (r+1)*n).
  void all_gather_single(Tensor& output, const Tensor& input, const CallOptions& options = {});
  // input = [world_size * output.size(0), ...]: rank r gets the reduction of every rank's block r.
  void reduce_scatter_single(Tensor& output, const Tensor& input, const ReduceOptions& options = {});
  // Equal splits along dim 0: block j of input goes to rank j; block j of output comes from rank j.
  void all_to_all_single(Tensor& output, const Tensor& input, const CallOptions& options = {});
  // Uneven splits (see AllToAllOptions).
  void all_to_all_single(Tensor& output, const Tensor& input, const AllToAllOptions& options);
  void barrier(const CallOptions& options = {});
  void send(const Tensor& tensor, int dst, const CallOptions& options = {});
  void recv(Tensor& tensor, int src, const CallOptions& options = {});

  // Deprecated names (PyTorch 2.13): one warning per process and name, naming the new function, on
  // stderr unless a binding claimed it (claim_deprecation_warning).
  void all_gather_into_tensor(Tensor& output, const Tensor& input, const CallOptions& options = {});
  void reduce_scatter_tensor(Tensor& output, const Tensor& input, const ReduceOptions& options = {});

  // ---- collectives: async (the tensors must stay alive and untouched until the Work completes) ----
  Work all_reduce_async(Tensor tensor, const ReduceOptions& options = {});
  Work broadcast_async(Tensor tensor, int root, const CallOptions& options = {});
  Work all_gather_single_async(Tensor output, Tensor input, const CallOptions& options = {});
  Work reduce_scatter_single_async(Tensor output, Tensor input, const ReduceOptions& options = {});
  Work all_to_all_single_async(Tensor output, Tensor input, const CallOptions& options = {});
  Work all_to_all_single_async(Tensor output, Tensor input, const AllToAllOptions& options);
  Work barrier_async(const CallOptions& options = {});
  Work send_async(Tensor tensor, int dst, const CallOptions& options = {});
  Work recv_async(Tensor tensor, int src, const CallOptions& options = {});

  // ---- fault tolerance ----
  // Releases every blocked or queued call (they throw DistError, kind aborted), closes the
  // connections and dumps the flight recorder. Safe from any thread; idempotent.
  void abort();
  // Survivors agree through the store on who is alive (within options.window) and return the new
  // group: ranks renumbered in order of old rank, generation + 1. This group becomes unusable.
  // Throws DistError when this rank was left out (it answered too late).
  ProcessGroup shrink(const ShrinkOptions& options = {});
  // Like shrink(), and also admits the ranks waiting in join(); they get the highest new ranks.
  ProcessGroup reconfigure(const ShrinkOptions& options = {});

  // ---- sharing a link with another group ----
  // From now on this group's reduce-scatters (and the all_reduces that start with one) give way to
  // `other`'s collectives on this rank: on the direct path they move their data in pieces of about
  // `piece_bytes` (all peers together) and send each piece only while no caller on this rank is
  // blocked on a call of `other` (in Work::wait or a blocking call). Two groups over one link then
  // do not split it evenly when it matters: the call that a caller waits for on `other` (sharded
  // training's next all-gather) gets the link, waiting for at most one piece, and this group's data
  // fills the gaps; a call nobody waits for yet (a prefetch) shares the link. Every rank of the
  // group calls it alike (the piece size is part of each call's header: ranks that differ get a
  // mismatch); `other` must not give way to this group. Waits stay bounded by the call's deadline
  // and released by abort(). Call it again to give way to more groups; this generation only.
  // It adds one dependency between the groups: a rank's sends here wait for its callers on `other`.
  // A rank must not wait on `other` for a call that a peer makes only after waiting for a call of
  // this group that the rank has not finished (they would wait for each other until the deadline);
  // sharded training finishes its reduce-scatters in the same order on every rank, so it never does.
  void give_way_to(const ProcessGroup& other, std::size_t piece_bytes = 512 * 1024);

  // ---- flight recorder ----
  std::string trace_json() const;              // the ring buffer as JSON
  std::string dump_trace(const std::string& path = "") const;  // writes it (atomic); returns the path

  // Raw access for benchmarks that compare against Gloo's own algorithms (gloo::Context*).
  void* gloo_context() const;

 private:
  explicit ProcessGroup(std::shared_ptr<detail::GroupImpl> impl);
  Work enqueue(std::shared_ptr<detail::WorkState> state);
  std::shared_ptr<detail::GroupImpl> impl_;
};

}  // namespace lmcore::dist
