#include "lmcore/core/fault_injection.h"

#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include <fmt/format.h>

namespace lmcore {

namespace {

struct Spec {
  std::string site;
  long long nth = 0;
  int rank = -1;  // -1: any
};

// "SITE:N[@RANK]" -> Spec; false when malformed.
bool parse(const char* text, Spec* out) {
  const std::string s(text);
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  out->site = s.substr(0, colon);
  std::string rest = s.substr(colon + 1);
  const auto at = rest.find('@');
  std::string nth = rest.substr(0, at);
  char* end = nullptr;
  out->nth = std::strtoll(nth.c_str(), &end, 10);
  if (nth.empty() || *end != '\0' || out->nth < 1) return false;
  if (at != std::string::npos) {
    const std::string r = rest.substr(at + 1);
    const long v = std::strtol(r.c_str(), &end, 10);
    if (r.empty() || *end != '\0' || v < 0) return false;
    out->rank = static_cast<int>(v);
  }
  return true;
}

std::mutex g_mu;
std::map<std::string, long long> g_counts;

}  // namespace

std::string fault_spec_error() {
  const char* v = std::getenv("LMCORE_FAULT");
  if (v == nullptr || *v == '\0') return "";
  Spec s;
  if (!parse(v, &s)) return fmt::format("LMCORE_FAULT='{}' is malformed: expected SITE:N or SITE:N@RANK (N >= 1)", v);
  const char* a = std::getenv("LMCORE_FAULT_AFTER");
  if (a != nullptr && *a != '\0' && !parse(a, &s))
    return fmt::format("LMCORE_FAULT_AFTER='{}' is malformed: expected SITE:N (N >= 1)", a);
  return "";
}

void fault_point(const char* site) {
  const char* v = std::getenv("LMCORE_FAULT");
  if (v == nullptr || *v == '\0') return;
  Spec s, after;
  if (!parse(v, &s)) return;
  const char* a = std::getenv("LMCORE_FAULT_AFTER");
  const bool has_after = a != nullptr && *a != '\0' && parse(a, &after);
  if (s.site != site && !(has_after && after.site == site)) return;
  if (const char* restarted = std::getenv("LMCORE_RESTART_COUNT"); restarted && std::atoi(restarted) > 0) return;
  if (s.rank >= 0) {
    const char* r = std::getenv("LMCORE_RANK");
    if (r == nullptr || std::atoi(r) != s.rank) return;
  }
  long long n;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (has_after && after.site == site) {
      ++g_counts["after:" + after.site];
      if (s.site != site) return;
    }
    if (has_after && g_counts["after:" + after.site] < after.nth) return;
    n = ++g_counts[site];
  }
  if (n != s.nth) return;
  if (const char* stamp = std::getenv("LMCORE_FAULT_STAMP"); stamp && *stamp) {
    timeval tv{};
    ::gettimeofday(&tv, nullptr);
    if (std::FILE* f = std::fopen(stamp, "w")) {
      std::fprintf(f, "%lld.%06ld\n", static_cast<long long>(tv.tv_sec), static_cast<long>(tv.tv_usec));
      std::fclose(f);
    }
  }
  std::fprintf(stderr, "lmcore: fault injection: %s pass %lld: SIGKILL\n", site, n);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  ::pause();  // SIGKILL cannot be caught; this is never reached
}

}  // namespace lmcore
