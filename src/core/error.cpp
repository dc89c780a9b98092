#include "lmcore/core/error.h"

namespace lmcore::detail {

void assertion_failed(const char* file, int line, const char* expr, const std::string& detail) {
  std::string message = fmt::format("lmcore internal error at {}:{}: {}", file, line, expr);
  if (!detail.empty()) message += " (" + detail + ")";
  // An invariant that does not hold is a bug; throwing keeps the process (and a Python host) alive.
  throw std::logic_error(message);
}

}  // namespace lmcore::detail
