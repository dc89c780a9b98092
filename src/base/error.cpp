#include "lmcore/base/error.h"

#include <cstring>

namespace lmcore {

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (possibly not in buf); it is thread-safe, unlike strerror.
  return ::strerror_r(err, buf, sizeof buf);
}

}  // namespace lmcore

namespace lmcore::detail {

void assertion_failed(const char* file, int line, const char* expr, const std::string& detail) {
  std::string message = fmt::format("lmcore internal error at {}:{}: {}", file, line, expr);
  if (!detail.empty()) message += " (" + detail + ")";
  // An invariant that does not hold is a bug; throwing keeps the process (and a Python host) alive.
  throw std::logic_error(message);
}

}  // namespace lmcore::detail
