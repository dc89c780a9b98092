// Private: a group's configuration, in one object that lives as long as the group and passes to the
// groups that follow it.
//
// Built once from GroupOptions and the LMCORE_* environment (GroupConfig::resolve), then owned by the
// group. The default call timeout lives here and nowhere else: set_timeout() changes it, each call
// reads it when it is enqueued (unless the call brings its own), and shrink(), reconfigure() hand a
// copy of the whole config, with the timeout as it is at that moment, to the next generation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "lmcore/dist/process_group.h"

namespace lmcore::dist::detail {

class GroupConfig {
 public:
  // Fills what `o` leaves unset from LMCORE_* (store, timeouts, trace, host) and checks it. Rank and
  // world size belong to a generation, not to the config: see rank_and_world_size.
  static GroupConfig resolve(const GroupOptions& o);

  GroupConfig() = default;
  GroupConfig(const GroupConfig& other);
  GroupConfig& operator=(const GroupConfig& other);

  std::string name = "pg";  // key prefix: several groups share one store
  std::string store_url;
  std::string host;         // the address Gloo listens on
  std::string trace_dir;
  int trace_size = 256;
  std::chrono::milliseconds connect_timeout{120000};
  // Algorithm choice; part of every call's header, so ranks that cut data differently are caught.
  std::size_t direct_max_bytes = 0;
  std::size_t ring_chunk_bytes = 0;
  // Not in the header: ranks that disagree send different first-round messages, which the header
  // round reports as a mismatch (the payload bytes differ).
  std::size_t inline_max_bytes = 0;

  std::chrono::milliseconds call_timeout() const { return std::chrono::milliseconds(call_timeout_ms_.load()); }
  void set_call_timeout(std::chrono::milliseconds timeout);  // must be positive
  // A call's timeout: its own when positive, else the group's.
  std::chrono::milliseconds timeout_for(std::chrono::milliseconds per_call) const {
    return per_call.count() > 0 ? per_call : call_timeout();
  }

 private:
  std::atomic<std::int64_t> call_timeout_ms_{30000};
};

// options.rank and options.world_size, else LMCORE_RANK and LMCORE_WORLD_SIZE; checked.
std::pair<int, int> rank_and_world_size(const GroupOptions& options);

}  // namespace lmcore::dist::detail
