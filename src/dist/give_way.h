// Private: how the calls of one group give way to another group's on this rank
// (ProcessGroup::give_way_to).
//
// Each group counts the callers waiting for its calls on this rank (Activity: a thread inside
// Work::wait, or running a blocking call itself). A group that gives way moves its reduce-scatter
// data in pieces and, before it sends a piece, waits until no caller waits on any group it gives way
// to. A call that nobody waits for yet (a prefetch) shares the link; one that a caller is blocked on
// gets it. Only sending waits: a rank keeps receiving what its peers send, so the pieces of a call
// stay in step across ranks. Pieces are received one at a time (the receive of piece j+1 is posted
// once piece j is in), and Gloo moves a send's data only once its receive is posted, so at most one
// piece per peer sits in the kernel's queues when a caller starts waiting on the other group: that
// call waits for one piece, not for the whole reduce-scatter, on a link the two share.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "src/dist/call.h"

namespace lmcore::dist::detail {

class CallContext;

// The callers waiting for one group's calls on this rank.
class Activity {
 public:
  void begin();
  void end();
  // Waits until no caller waits, or `until` passes; whether none does.
  bool wait_idle_until(Clock::time_point until);
  // begin() .. end() for a scope.
  class Waiting {
   public:
    explicit Waiting(Activity& a) : a_(a) { a_.begin(); }
    ~Waiting() { a_.end(); }
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    Activity& a_;
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int busy_ = 0;  // guarded by mu_
};

struct GiveWay {
  std::vector<std::shared_ptr<Activity>> to;  // the groups this one gives way to
  std::size_t piece_bytes = 0;                // per piece, all peers together; 0: does not give way

  bool active() const { return piece_bytes > 0; }
  // How many pieces a call whose longest segment is `max_len` bytes moves in: a piece carries about
  // piece_bytes / (n - 1) bytes to each of the n - 1 peers. The same on every rank for one call.
  int pieces(std::size_t max_len, int n) const;
  // Blocks while a caller on this rank waits for a call of any group in `to`. Throws
  // DeadlineSignal when the call's deadline passes first, AbortedSignal when the group is aborted
  // (looked at every 20 ms).
  void wait_clear(const CallContext& ctx) const;
};

}  // namespace lmcore::dist::detail
