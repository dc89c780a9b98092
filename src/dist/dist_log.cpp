// Structured JSON-lines logs (LMCORE_DIST_LOG) and the once-per-process deprecation warnings.
#include "src/dist/dist_log.h"

#include "lmcore/dist/process_group.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "lmcore/base/file.h"
#include "src/dist/flight_recorder_impl.h"

namespace lmcore::dist::detail {

DistLog::~DistLog() {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

void DistLog::open_from_env(int rank) {
  const char* env = std::getenv("LMCORE_DIST_LOG");
  if (env == nullptr || *env == '\0' || std::string(env) == "0") return;
  std::string target = env;
  if (target == "stderr" || target == "1") {
    fd_ = STDERR_FILENO;
    return;
  }
  for (auto pos = target.find("{rank}"); pos != std::string::npos; pos = target.find("{rank}")) {
    target.replace(pos, 6, std::to_string(rank));
  }
  fd_ = ::open(target.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    std::fprintf(stderr, "lmcore.dist: cannot open LMCORE_DIST_LOG file '%s'; structured logs disabled\n",
                 target.c_str());
    return;
  }
  owns_fd_ = true;
}

void DistLog::write_line(const std::string& line) {
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  // One write(2) per line: O_APPEND keeps lines from several ranks whole.
  const std::string out = line + "\n";
  (void)base::write_all(fd_, out);  // logging never fails a collective
}

void DistLog::write(const LogRecord& r) {
  if (fd_ < 0) return;
  nlohmann::json j = {{"ts", wall_seconds()}, {"rank", r.rank},   {"generation", r.generation},
                      {"seq", r.seq},         {"op", r.op},       {"dtype", r.dtype},
                      {"bytes", r.bytes},     {"duration_ms", r.duration_ms}, {"status", r.status}};
  if (r.peer >= 0) j["peer"] = r.peer;
  if (!r.error.empty()) j["error"] = r.error;
  write_line(j.dump());
}

void DistLog::event(int rank, int generation, const std::string& event, const std::string& detail) {
  if (fd_ < 0) return;
  nlohmann::json j = {{"ts", wall_seconds()}, {"rank", rank}, {"generation", generation},
                      {"event", event},       {"detail", detail}};
  write_line(j.dump());
}

namespace {
std::mutex deprecation_mu;
std::set<std::string, std::less<>> deprecation_warned;  // guarded by deprecation_mu

bool first_deprecation(std::string_view old_name) {
  std::lock_guard<std::mutex> lock(deprecation_mu);
  return deprecation_warned.emplace(old_name).second;
}
}  // namespace

bool warn_deprecated_once(const char* old_name, const char* new_name) {
  if (!first_deprecation(old_name)) return false;
  std::fprintf(stderr, "lmcore.dist: %s is deprecated, use %s\n", old_name, new_name);
  std::fflush(stderr);
  return true;
}

}  // namespace lmcore::dist::detail

namespace lmcore::dist {
bool claim_deprecation_warning(std::string_view old_name) { return detail::first_deprecation(old_name); }
}  // namespace lmcore::dist
