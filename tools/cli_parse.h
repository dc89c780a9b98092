// tools/cli_parse.h — how every lmcore command parses its arguments, so that they all behave alike:
// `--help` prints the options (each with its default) and exits 0; a usage error — an unknown
// option, a missing or malformed value, a failed check — prints CLI11's message and a pointer to
// --help on stderr and exits 2, never CLI11's own codes (105, 106, 109, ...).
//
//   CLI::App app{"...", "lmcore convert"};
//   app.add_option(...);
//   LMCORE_PARSE_ARGS(app, argc, argv);   // returns 0 or 2 from the command when it must stop
#pragma once

#include <optional>

#include <CLI/CLI.hpp>

namespace lmcore::cli {

// The exit code when the command must stop after parsing (0: help or version printed; 2: usage
// error), or nullopt to go on.
inline std::optional<int> parse_args(CLI::App& app, int argc, const char* const* argv) {
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
