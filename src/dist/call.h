// Private: one call of a ProcessGroup as the worker runs it: what it is (OpDesc) and how its caller
// waits for it (WorkState).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

#include "lmcore/core/tensor.h"
#include "lmcore/dist/process_group.h"

namespace lmcore::dist::detail {

using Clock = std::chrono::steady_clock;

// Append-only: the value travels in every call's header.
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
  std::int64_t seq = 0;        // collectives: the group's sequence number; p2p: the pair's counter
  // all_to_all_single: rows to / from each rank (AllToAllOptions); empty: equal splits.
  std::vector<std::int64_t> input_split_rows, output_split_rows;
};

struct WorkState {
  OpDesc op;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::size_t trace_id = 0;
};

}  // namespace lmcore::dist::detail
