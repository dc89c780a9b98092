// Private: the state behind a ProcessGroup.
//
//   GroupConfig    options and the call timeout (group_config.h)
//   Transport      Gloo's device and pairs, the buffers calls wait on (context.h)
//   Membership     the watcher, the roll call, shrink/reconfigure/join (membership.h)
//   the worker     runs queued calls in order; send/recv run on threads of their own
//   FlightRecorder, DistLog   what happened, for `lmcore trace` and LMCORE_DIST_LOG
//
// The algorithms (header_round, direct, ring) and the collectives that pick among them never see
// this struct: they run in a CallContext.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lmcore/dist/process_group.h"
#include "src/dist/call.h"
#include "src/dist/context.h"
#include "src/dist/dist_log.h"
#include "src/dist/flight_recorder_impl.h"
#include "src/dist/give_way.h"
#include "src/dist/group_config.h"
#include "src/dist/membership.h"

namespace lmcore::dist::detail {

struct GroupImpl {
  GroupConfig config;
  std::shared_ptr<Store> root_store;   // the store as opened
  std::shared_ptr<Store> group_store;  // keys under "<name>/"
  int rank = 0;
  int size = 1;
  int generation = 0;
  std::int64_t join_consumed = 0;      // join tickets admitted so far
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Membership> membership;
  CallScratch scratch;                 // used by one collective at a time (the worker's)

  std::int64_t next_seq = 0;                       // guarded by queue_mu
  std::vector<std::uint64_t> p2p_sent, p2p_recvd;  // guarded by queue_mu

  // The worker runs queued calls in order; callers wait on WorkState.
  std::mutex queue_mu;
  std::condition_variable queue_cv;
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

  // The callers waiting for this group's calls (others may give way to them), and the groups this
  // one gives way to (ProcessGroup::give_way_to).
  std::shared_ptr<Activity> activity = std::make_shared<Activity>();
  GiveWay give_way;  // guarded by queue_mu

  std::atomic<bool> aborted{false};
  std::atomic<bool> broken{false};
  std::string broken_reason;  // guarded by queue_mu

  FlightRecorder recorder;
  DistLog log;

  GroupImpl() = default;
  ~GroupImpl();
  void start_worker();
  void stop_worker();
  void prune_p2p_threads_locked();  // joins finished send/recv threads
  void worker_loop();
  void execute(WorkState& work);
  std::int64_t last_issued();  // the last collective sequence number this rank's callers issued
  void abort_now(const std::string& why);
  // Marks the group unusable and closes every connection, so that peers fail at once.
  void mark_broken(const std::string& why);
  std::string trace_dump(const std::string& reason, const std::string& path) const;
};

// Connects generation `generation` (store keys "<name>/g<generation>/...") and starts the worker.
std::shared_ptr<GroupImpl> make_group(const GroupConfig& config, std::shared_ptr<Store> root,
                                      std::shared_ptr<gloo::transport::Device> device, int rank, int size,
                                      int generation, std::int64_t join_consumed);
// shrink (admit_joiners false) and reconfigure (true); in membership.cpp.
std::shared_ptr<GroupImpl> reform(GroupImpl& old, const ShrinkOptions& options, bool admit_joiners);

}  // namespace lmcore::dist::detail
