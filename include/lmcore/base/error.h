// lmcore/base/error.h — the one error type lmcore throws for bad input, and the checks that build it.
//
// Two kinds of failure (see STYLE.md):
//  * recoverable ones — bad arguments, malformed files, network trouble — throw lmcore::Error with a
//    message a person can act on: the op, the argument, the expected and the found value, e.g.
//      "gather: index[3] = 17 is out of range, expected 0 <= index < 10 (input size along dim 1)";
//  * broken internal invariants use LMCORE_ASSERT, which names file:line and the expression.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace lmcore {

// Thrown for every recoverable failure. `what()` is the full, self-contained message.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string message) : std::runtime_error(std::move(message)) {}
};

// strerror(err) as a std::string ("No such file or directory"), for messages.
std::string errno_text(int err);

// Throws Error with a formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void assertion_failed(const char* file, int line, const char* expr, const std::string& detail);
}  // namespace detail

}  // namespace lmcore

// Argument check: LMCORE_CHECK(cond, "op: argument 'x' expected {}, found {}", a, b).
#define LMCORE_CHECK(cond, ...)            \
  do {                                     \
    if (!(cond)) ::lmcore::fail(__VA_ARGS__); \
  } while (0)

// Internal invariant: a failure is a bug in lmcore, not in the caller's input.
#define LMCORE_ASSERT(cond)                                                            \
  do {                                                                                 \
    if (!(cond)) ::lmcore::detail::assertion_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

// Invariant with both values shown: LMCORE_ASSERT_EQ(a, b) -> "file:line: a == b (3 vs 4)".
#define LMCORE_ASSERT_EQ(a, b)                                                                \
  do {                                                                                        \
    const auto& lmcore_a_ = (a);                                                              \
    const auto& lmcore_b_ = (b);                                                              \
    if (!(lmcore_a_ == lmcore_b_))                                                            \
      ::lmcore::detail::assertion_failed(__FILE__, __LINE__, #a " == " #b,                   \
                                         fmt::format("{} vs {}", lmcore_a_, lmcore_b_));      \
  } while (0)
