// Private: who belongs to a group, and how the members agree on it through the store.
//
// Membership owns the group's side of the store protocol, all under "<name>/":
//   g<gen>/failed          posted by the first rank whose call failed
//   g<gen>/alive/<rank>    the roll call: the last sequence number the rank reached (+ " failed"
//                          when its own call there failed)
//   g<gen>/shrink/<rank>   arrived at shrink() / reconfigure()
//   g<gen>/decision        the members of generation gen+1 (first proposal wins)
//   join/next, join/ticket/<t>, join/assign/<t>   restarted ranks waiting to be admitted
// Its watcher thread makes a rank whose own connections still look fine learn of a failure within
// ~50 ms, and answers the roll call for it while its caller is busy elsewhere.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lmcore/dist/store.h"
#include "src/dist/call.h"

namespace lmcore::dist::detail {

class Membership {
 public:
  Membership(std::shared_ptr<Store> group_store, int rank, int size, int generation)
      : store_(std::move(group_store)), rank_(rank), size_(size), generation_(generation) {}
  ~Membership() { stop_watcher(); }
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Starts the watcher (with peers only): it polls "g<gen>/failed" every 50 ms, whether or not a call
  // is running; the first time it is there, it calls on_failure() and answers the roll call with
  // reached() (the last collective this rank's caller issued).
  void start_watcher(std::function<std::int64_t()> reached, std::function<void()> on_failure);
  void stop_watcher();  // idempotent
  // The watcher saw a failure of this generation posted by another rank.
  bool failure_posted() const { return failure_posted_.load(); }

  // After this rank's call `seq` failed: answers the roll call, then posts the failure. Called before
  // the connections close, so that a peer that sees them close finds the answer already there.
  // Throws StoreError when the store is unreachable.
  void report_failure(std::int64_t seq);
  // Writes "g<gen>/alive/<rank>"; serialised and monotonic. failed_there: this rank's own call
  // `reached` failed (a live rank held back by the failure).
  void answer(std::int64_t reached, bool failed_there = false);
  // The ranks that did not reach `op` or answer (see membership.cpp); all others, with *note set,
  // when the store is unreachable. connection_failed: a connection broke (or a failure was posted)
  // before the deadline.
  std::vector<int> roll_call(const OpDesc& op, bool connection_failed, std::string* note);

  // Survivors of this generation agree on the members of the next: old ranks in order, and with
  // admit_joiners the join tickets up to joiners_upto.
  struct Decision {
    std::vector<int> members;
    std::int64_t joiners_upto = 0;
  };
  Decision agree_on_next(std::int64_t reached, std::chrono::milliseconds window, bool admit_joiners, int min_joiners,
                         std::int64_t join_consumed, const char* opname);
  // Tells each admitted joiner its place: "join/assign/<ticket>" = "<gen+1> <rank> <size> <joiners_upto>".
  void assign_joiners(const Decision& d, std::int64_t join_consumed);

  // For a restarted process: takes a ticket and waits (at most `wait`) for its assignment.
  struct Admission {
    int generation = 0, rank = 0, world_size = 0;
    std::int64_t joiners_upto = 0;
  };
  static Admission request_admission(Store& group_store, const std::string& group_name, const std::string& host,
                                     std::chrono::milliseconds wait);

 private:
  void watcher_loop(const std::function<std::int64_t()>& reached, const std::function<void()>& on_failure);
  std::string key(const std::string& rest) const;  // "g<gen>/<rest>"

  std::shared_ptr<Store> store_;
  const int rank_, size_, generation_;
  std::atomic<bool> failure_posted_{false};
  std::thread watcher_;
  std::mutex watcher_mu_;
  std::condition_variable watcher_cv_;
  bool stopping_ = false;  // guarded by watcher_mu_
  std::mutex answer_mu_;
  std::int64_t answered_ = std::numeric_limits<std::int64_t>::min();  // guarded by answer_mu_
  bool answered_failed_ = false;  // `answered_` is a call this rank failed in (answer_mu_)
};

}  // namespace lmcore::dist::detail
