// tools/cli_parse.h — how every lmcore command parses its arguments, so that they all behave alike:
// `--help` prints the options (each with its default) and exits 0; a usage error — an unknown
// option, a missing or malformed value, a failed check — prints CLI11's message and a pointer to
// --help on stderr and exits 2, never CLI11's own codes (105, 106, 109, ...).
//
//   CLI::App app{"...", "lmcore convert"};
//   app.add_option(...);
//   LMCORE_PARSE_ARGS(app, argc, argv);   // returns 0 or 2 from the command when it must stop
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

namespace lmcore::cli {

// CLI11 2.1 reads integers with strtoll / strtoull, which saturate and wrap: "--max-steps
// 99999999999999999999" became 2^63 - 1 and "--seed -1" 2^64 - 1 without a word. parse_args adds
// this check to every integer option of the command and its subcommands.
inline CLI::Validator fits_integer(bool is_unsigned) {
  return CLI::Validator(
      [is_unsigned](std::string& text) -> std::string {
        const char* s = text.c_str();
        while (*s == ' ' || *s == '\t') ++s;
        if (is_unsigned && *s == '-') return "expected a non-negative integer, found " + text;
        errno = 0;
        char* end = nullptr;
        if (is_unsigned) (void)std::strtoull(s, &end, 0);
        else (void)std::strtoll(s, &end, 0);
        if (errno == ERANGE) return "value " + text + " does not fit a 64-bit integer";
        return "";  // malformed text is CLI11's to report
      },
      "");
}

inline void check_integer_options(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type.rfind("INT", 0) == 0) opt->check(fits_integer(false));
    else if (type.rfind("UINT", 0) == 0) opt->check(fits_integer(true));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) check_integer_options(*sub);
}

// Bounds whose messages people can read (CLI11 2.1's PositiveNumber and NonNegativeNumber print a
// range up to DBL_MAX in full). NaN and infinity are never in range: "--lr nan" used to reach the
// optimizer, whose own check exits 1 without naming the option.
inline CLI::Validator in_range(double lowest, double highest, bool highest_open, std::string what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str()) return "";  // not a number: CLI11 reports it
        const bool ok = std::isfinite(v) && v >= lowest && (highest_open ? v < highest : v <= highest);
        return ok ? "" : "expected " + what + ", found " + text;
      },
      "");
}
inline CLI::Validator at_least(double lowest, std::string what) {
  return in_range(lowest, std::numeric_limits<double>::infinity(), false, std::move(what));
}
inline CLI::Validator positive() { return at_least(std::numeric_limits<double>::denorm_min(), "a positive number"); }
inline CLI::Validator non_negative() { return at_least(0.0, "a number >= 0"); }

// The exit code when the command must stop after parsing (0: help or version printed; 2: usage
// error), or nullopt to go on.
inline std::optional<int> parse_args(CLI::App& app, int argc, const char* const* argv) {
  check_integer_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

// The exit code of a usage error a command finds itself, after parsing.
inline constexpr int kUsageError = 2;

}  // namespace lmcore::cli

#define LMCORE_PARSE_ARGS(app, argc, argv)                                         \
  do {                                                                             \
    if (const auto lmcore_rc_ = ::lmcore::cli::parse_args((app), (argc), (argv))) \
      return *lmcore_rc_;                                                          \
  } while (0)
