// Private: the state behind a ProcessGroup, and the execution context every collective algorithm
// runs in (bounded waits, abort, slots). Algorithms are in collectives_*.cpp; the group's life cycle
// (rendezvous, worker thread, failure handling, shrink) in process_group.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "lmcore/dist/process_group.h"
#include "src/dist/dist_log.h"
#include "src/dist/flight_recorder_impl.h"
#include "src/dist/group_config.h"

namespace lmcore::dist::detail {

using Clock = std::chrono::steady_clock;

enum class OpKind : std::uint8_t {
  all_reduce = 1,
  broadcast = 2,
  all_gather = 3,
  reduce_scatter = 4,
  all_to_all = 5,
  barrier = 6,
  send = 7,
  recv = 8,
};
const char* op_kind_name(OpKind kind);  // "all_reduce", "all_gather_single", ...
inline bool is_p2p(OpKind k) { return k == OpKind::send || k == OpKind::recv; }

// One queued call. `a` is the tensor written (or sent), `b` the input of out-of-place collectives.
struct OpDesc {
  OpKind kind = OpKind::barrier;
  Tensor a, b;
  ReduceOp rop = ReduceOp::sum;
  double factor = 1.0;
  int peer = -1;  // broadcast root, send destination, recv source
  std::chrono::milliseconds timeout{0};
  Clock::time_point deadline;
  std::int64_t seq = 0;        // collectives: the group's sequence number; p2p: per-peer counter
  std::uint64_t p2p_slot_key = 0;
  // all_to_all_single: rows to / from each rank (AllToAllOptions); empty: equal splits.
  std::vector<std::int64_t> input_split_rows, output_split_rows;
};

// all_to_all_single's elements to (input) or from (output) each rank: the split sizes times the
// elements per row, or equal blocks. Assumes make_header found the arguments valid.
std::vector<std::int64_t> all_to_all_split_elements(const OpDesc& op, int world_size, bool input);

struct WorkState {
  OpDesc op;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::size_t trace_id = 0;
};

// The fixed-size header every rank sends to every peer at the start of a collective (to the one peer
// before send/recv). Comparing them catches mismatched calls before any payload is used. A small
// payload travels in the same message, right after the header (see exchange_headers).
struct Header {
  std::uint32_t magic = 0x4c4d4344;  // "LMCD"
  std::uint32_t generation = 0;
  std::int64_t seq = 0;
  std::uint8_t op = 0;
  std::uint8_t dtype_in = 0;
  std::uint8_t dtype_out = 0;
  std::uint8_t rop = 0;
  std::int32_t root = -1;
  std::int64_t count_in = 0;   // elements
  std::int64_t count_out = 0;
  // The algorithm options: ranks that cut the data differently would not match up.
  std::uint64_t direct_max_bytes = 0;
  std::uint64_t ring_chunk_bytes = 0;
  std::uint8_t uneven_splits = 0;  // all_to_all_single with split sizes: a second round checks them
  std::uint32_t inline_bytes = 0;  // payload bytes that follow this header in the same message
  char local_error[96] = {};   // non-empty: this rank's arguments are invalid (reason)
};

struct GroupImpl : std::enable_shared_from_this<GroupImpl> {
  GroupConfig config;                  // options and the default call timeout (set_timeout)
  std::shared_ptr<Store> root_store;   // the store as opened
  std::shared_ptr<Store> group_store;  // keys under "<name>/"
  int rank = 0;
  int size = 1;
  int generation = 0;
  std::int64_t join_consumed = 0;      // join tickets admitted so far
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;

  std::int64_t next_seq = 0;                      // guarded by queue_mu
  std::vector<std::uint64_t> p2p_sent, p2p_recvd;  // guarded by queue_mu

  // The worker runs queued calls in order; callers wait on WorkState.
  std::mutex queue_mu;
  std::condition_variable queue_cv;
  // The watcher's own: waking it on every call (through queue_cv) cost a store lookup per call.
  std::condition_variable watcher_cv;
  std::deque<std::shared_ptr<WorkState>> queue;
  bool stopping = false;
  bool inline_running = false;  // a blocking call is running on its caller's thread
  bool worker_running = false;
  std::thread worker;
  struct P2PThread {
    std::shared_ptr<WorkState> work;
    std::thread thread;
  };
  std::vector<P2PThread> p2p_threads;  // guarded by queue_mu

  std::atomic<bool> aborted{false};
  std::atomic<bool> broken{false};
  // Set by the watcher when another rank reported a failure of this generation through the store
  // ("g<gen>/failed"): a rank whose own peers are still connected would otherwise wait out its
  // whole timeout. The watcher then also answers the roll call for this rank, so a live rank is
  // counted even while its caller is busy elsewhere or the machine is loaded.
  std::atomic<bool> peer_failed{false};
  std::thread watcher;
  std::mutex answer_mu;
  std::int64_t answered = std::numeric_limits<std::int64_t>::min();  // guarded by answer_mu
  bool answered_failed = false;  // `answered` is a collective this rank failed in (answer_mu)
  std::string broken_reason;  // guarded by queue_mu

  // Buffers a collective is waiting on, so abort() can release the waits.
  std::mutex active_mu;
  std::vector<gloo::transport::UnboundBuffer*> active;

  FlightRecorder recorder;
  DistLog log;
  // Receive buffers of the ring reduce-scatter, reused across calls (calls run one at a time).
  std::vector<std::byte> ring_scratch;
  // The first round's messages (header + inline payload) out and in, reused the same way.
  std::vector<std::byte> first_out, first_in;

  GroupImpl() = default;
  ~GroupImpl();
  void start_worker();
  void stop_worker();
  void prune_p2p_threads_locked();  // joins finished send/recv threads
  void watcher_loop();
  void release_waits();  // wakes every wait on an active buffer (they return "aborted")
  void worker_loop();
  void execute(WorkState& work);
  void abort_now(const std::string& why);
  // Marks the group unusable and closes every connection, so that peers fail at once.
  void mark_broken(const std::string& why);
  // The roll call after a failure of collective `op` (see roll_call in process_group.cpp); returns
  // the ranks that did not answer (all others, with *note set, when the store is unreachable).
  // connection_failed: a connection broke (or a peer posted a failure) before the deadline.
  std::vector<int> roll_call(const OpDesc& op, bool connection_failed, std::string* note);
  // Writes "g<gen>/alive/<rank>" = the last sequence number this rank reached (+ " failed").
  // failed_there: this rank's own call `reached` failed (a live rank held back by the failure).
  void answer_roll_call(std::int64_t reached, bool failed_there = false);
  std::string trace_dump(const std::string& reason, const std::string& path) const;
};

// The context one collective runs in: deadline, abort, slots and buffer registration.
class Exec {
 public:
  Exec(GroupImpl& g, const OpDesc& op) : g_(g), op_(op) {}
  GroupImpl& group() { return g_; }
  const GroupImpl& group() const { return g_; }
  const OpDesc& op() const { return op_; }
  int rank() const { return g_.rank; }
  int size() const { return g_.size; }

  // A Gloo buffer over [ptr, ptr+n) registered for abort(); unregistered on destruction.
  class Buffer {
   public:
    Buffer(Exec& ex, void* ptr, std::size_t n);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    void send(int dst, std::uint64_t slot, std::size_t offset, std::size_t nbytes);
    void recv(int src, std::uint64_t slot, std::size_t offset, std::size_t nbytes);
    void wait_send();
    void wait_recv();
    std::byte* data() const { return static_cast<std::byte*>(buf_->ptr); }

   private:
    Exec& ex_;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  };

  // Slot of step `step` of this collective's payload (unique per generation and sequence number).
  std::uint64_t data_slot(std::uint32_t step) const {
    return (std::uint64_t{1} << 60) | (static_cast<std::uint64_t>(op_.seq) << 12) | step;
  }
  std::chrono::milliseconds remaining() const;
  void check_abort() const;

  // Set by exchange_headers when the payload travelled with the headers: peer p's share for this
  // rank (p == rank(): this rank's own contribution, as it sent it), valid until the next call.
  bool payload_arrived() const { return shares_in_ != nullptr; }
  const std::byte* share_from(int p) const {
    return p == rank() ? own_share_ : shares_in_ + static_cast<std::size_t>(p) * share_stride_ + sizeof(Header);
  }
  void set_shares(const std::byte* in, std::size_t stride, const std::byte* own) {
    shares_in_ = in;
    share_stride_ = stride;
    own_share_ = own;
  }

 private:
  GroupImpl& g_;
  const OpDesc& op_;
  const std::byte* shares_in_ = nullptr;  // message p at shares_in_ + p * share_stride_
  std::size_t share_stride_ = 0;
  const std::byte* own_share_ = nullptr;
};

// Thrown inside algorithms when abort() released a wait, or the deadline had passed before a call.
struct AbortedSignal {};
struct DeadlineSignal {};

// Algorithms (collectives.cpp): each but all_gather assumes the header exchange already succeeded.
void exchange_headers(Exec& ex, const Header& mine);  // throws DistError(mismatch) on disagreement
void run_all_reduce(Exec& ex);
void run_broadcast(Exec& ex);
void run_all_gather(Exec& ex, const Header& header);  // runs its own header round
void run_reduce_scatter(Exec& ex);
void run_all_to_all(Exec& ex);
void run_send(Exec& ex);
void run_recv(Exec& ex);
Header make_header(const GroupImpl& g, const OpDesc& op);

}  // namespace lmcore::dist::detail
