// GroupConfig: GroupOptions completed from the LMCORE_* environment.
#include "src/dist/group_config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "lmcore/base/url.h"
#include "lmcore/core/error.h"
#include "src/dist/store_impl.h"

namespace lmcore::dist::detail {

namespace {

constexpr long kMaxInt = std::numeric_limits<int>::max();

// The whole value must be an integer in [lo, hi]: std::stoi took "30s" as 30 and "1x" as 1.
int env_int(const char* name, int fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || n < lo || n > hi)
    fail("ProcessGroup: environment variable {}='{}' is not an integer in [{}, {}]", name, v, lo, hi);
  return static_cast<int>(n);
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// The local address that routes to host:port (connect(2) on a UDP socket sends nothing).
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf))) out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return out;
}

}  // namespace

GroupConfig::GroupConfig(const GroupConfig& other) { *this = other; }

GroupConfig& GroupConfig::operator=(const GroupConfig& other) {
  name = other.name;
  store_url = other.store_url;
  host = other.host;
  trace_dir = other.trace_dir;
  trace_size = other.trace_size;
  connect_timeout = other.connect_timeout;
  direct_max_bytes = other.direct_max_bytes;
  ring_chunk_bytes = other.ring_chunk_bytes;
  inline_max_bytes = other.inline_max_bytes;
  call_timeout_ms_ = other.call_timeout_ms_.load();
  return *this;
}

void GroupConfig::set_call_timeout(std::chrono::milliseconds timeout) {
  LMCORE_CHECK(timeout.count() > 0, "ProcessGroup::set_timeout: timeout must be positive, found {} ms", timeout.count());
  call_timeout_ms_ = timeout.count();
}

std::pair<int, int> rank_and_world_size(const GroupOptions& o) {
  const int rank = o.rank >= 0 ? o.rank : env_int("LMCORE_RANK", -1, 0, kMaxInt);
  const int world = o.world_size >= 0 ? o.world_size : env_int("LMCORE_WORLD_SIZE", -1, 1, kMaxInt);
  // Neither given nor in the environment: the usual cause is a script started without the launcher.
  LMCORE_CHECK(o.world_size >= 0 || world >= 1,
               "ProcessGroup: no world size: LMCORE_WORLD_SIZE is not set and none was passed (start the ranks "
               "with `lmcore launch --nproc N -- ...`, or pass rank, world size and store)");
  LMCORE_CHECK(o.rank >= 0 || rank >= 0,
               "ProcessGroup: no rank: LMCORE_RANK is not set and none was passed (start the ranks with "
               "`lmcore launch --nproc N -- ...`, or pass rank, world size and store)");
  LMCORE_CHECK(world >= 1, "ProcessGroup: world_size {} ({}) must be >= 1", world,
               o.world_size >= 0 ? "passed" : "LMCORE_WORLD_SIZE");
  LMCORE_CHECK(rank >= 0 && rank < world, "ProcessGroup: rank {} ({}) must be in [0, world_size {})", rank,
               o.rank >= 0 ? "passed" : "LMCORE_RANK", world);
  return {rank, world};
}

GroupConfig GroupConfig::resolve(const GroupOptions& o) {
  GroupConfig c;
  c.name = o.name;
  c.store_url = o.store_url.empty() ? env_str("LMCORE_STORE") : o.store_url;
  LMCORE_CHECK(!c.store_url.empty(), "ProcessGroup: no store: pass store_url or set LMCORE_STORE "
                                     "(file:///path or redis://host:port)");
  std::chrono::milliseconds timeout = o.timeout;
  if (const int t = env_int("LMCORE_DIST_TIMEOUT_MS", 0, 1, kMaxInt); t > 0 && o.timeout == GroupOptions{}.timeout) {
    timeout = std::chrono::milliseconds(t);
  }
  LMCORE_CHECK(timeout.count() > 0, "ProcessGroup: timeout must be positive, found {} ms", timeout.count());
  c.call_timeout_ms_ = timeout.count();
  c.connect_timeout = o.connect_timeout;
  if (const int t = env_int("LMCORE_DIST_CONNECT_TIMEOUT_MS", 0, 1, kMaxInt); t > 0) {
    c.connect_timeout = std::chrono::milliseconds(t);
  }
  LMCORE_CHECK(c.connect_timeout.count() > 0, "ProcessGroup: connect_timeout must be positive, found {} ms",
               c.connect_timeout.count());
  c.trace_size = o.trace_size;
  if (const int n = env_int("LMCORE_DIST_TRACE_SIZE", 0, 1, 1 << 20); n > 0) c.trace_size = n;
  c.trace_dir = o.trace_dir.empty() ? env_str("LMCORE_DIST_TRACE_DIR") : o.trace_dir;
  if (c.trace_dir.empty()) {
    const std::string tmp = env_str("TMPDIR");
    c.trace_dir = (tmp.empty() ? std::string("/tmp") : tmp) + "/lmcore-trace";
  }
  c.host = o.host.empty() ? env_str("LMCORE_DIST_HOST") : o.host;
  if (c.host.empty()) {
    if (c.store_url.rfind("redis://", 0) == 0) {
      const base::Url u = base::parse_url(c.store_url, "ProcessGroup: store");
      c.host = local_address_towards(u.host, u.port.value_or(kRedisDefaultPort));
    }
    if (c.host.empty()) c.host = "127.0.0.1";
  }
  c.direct_max_bytes = o.direct_max_bytes;
  c.ring_chunk_bytes = o.ring_chunk_bytes;
  c.inline_max_bytes = o.inline_max_bytes;
  return c;
}

}  // namespace lmcore::dist::detail
