// Private: the ring buffer behind each group's flight recorder (thread-safe: callers record at
// enqueue, the worker updates states).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "lmcore/dist/flight_recorder.h"

namespace lmcore::dist::detail {

double wall_seconds();  // now, seconds since the Unix epoch

class FlightRecorder {
 public:
  explicit FlightRecorder(std::size_t capacity = 256) { set_capacity(capacity); }
  void set_capacity(std::size_t capacity);
  // Adds an entry; returns its id for update().
  std::size_t record(TraceEntry entry);
  void mark_started(std::size_t id);
  void mark_finished(std::size_t id, bool ok, const std::string& error);
  // Entries oldest first.
  std::vector<TraceEntry> snapshot() const;

 private:
  TraceEntry* find(std::size_t id);
  mutable std::mutex mu_;
  std::vector<TraceEntry> ring_;
  std::vector<std::size_t> ids_;
  std::size_t next_id_ = 1;
};

}  // namespace lmcore::dist::detail
