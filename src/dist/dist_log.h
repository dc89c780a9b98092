// Private: structured logs. When LMCORE_DIST_LOG is set, every call writes one JSON line:
//   {"ts": 1764670000.123, "rank": 0, "generation": 0, "seq": 7, "op": "all_reduce", "dtype": "f32",
//    "bytes": 4096, "duration_ms": 0.41, "status": "ok"}
// LMCORE_DIST_LOG=stderr (or 1) writes to stderr; anything else is a path ("{rank}" is replaced by
// the rank), opened in append mode so ranks can share one file (each line is one write(2)).
#pragma once

#include <mutex>
#include <string>

namespace lmcore::dist::detail {

struct LogRecord {
  int rank = 0, generation = 0;
  std::int64_t seq = 0;
  std::string op, dtype, status, error;
  std::int64_t bytes = 0;
  double duration_ms = 0;
  int peer = -1;
};

class DistLog {
 public:
  DistLog() = default;
  ~DistLog();
  DistLog(const DistLog&) = delete;
  DistLog& operator=(const DistLog&) = delete;
  // Reads LMCORE_DIST_LOG; a no-op when unset.
  void open_from_env(int rank);
  bool enabled() const { return fd_ >= 0; }
  void write(const LogRecord& r);
  // Events that are not calls (rendezvous, shrink): {"ts", "rank", "generation", "event", "detail"}.
  void event(int rank, int generation, const std::string& event, const std::string& detail);

 private:
  void write_line(const std::string& line);
  int fd_ = -1;
  bool owns_fd_ = false;
  std::mutex mu_;
};

// One deprecation warning per process and name, on stderr: "lmcore.dist: all_gather_into_tensor is
// deprecated, use all_gather_single". Returns true the first time; silent once the name was claimed
// (claim_deprecation_warning in process_group.h).
bool warn_deprecated_once(const char* old_name, const char* new_name);

}  // namespace lmcore::dist::detail
