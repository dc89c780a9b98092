// tools/cli_parse.h — how every lmcore command parses its arguments, so that they all behave alike:
// `--help` prints the options (each with its default) and exits 0; a usage error — an unknown
// option, a missing or malformed value, a failed check — prints a message and a pointer to --help on
// stderr and exits 2, never CLI11's own codes (105, 106, 109, ...). Every message starts with the
// command's name; unknown options and extra arguments are named in order, with the option a typo
// most likely meant.
//
//   CLI::App app{"...", "lmcore convert"};
//   app.add_option(...);
//   LMCORE_PARSE_ARGS(app, argc, argv);   // returns 0 or 2 from the command when it must stop
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "lmcore/base/parallel.h"

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
// --threads N: 0 (the default count) up to the pool's limit.
inline CLI::Validator thread_count() {
  return in_range(0, kMaxThreads, false, "a thread count in [0, " + std::to_string(kMaxThreads) + "] (0: the default)");
}

// Edit distance (insertions, deletions, substitutions) between two option names, for suggestions.
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The long option of `app` a mistyped "--name[=value]" most likely meant ("" if none is close): the
// nearest within max(2, a third of the name's length) edits, where one the given name extends or
// abbreviates counts as one edit away.
inline std::string closest_option(const CLI::App& app, const std::string& given) {
  const std::size_t start = given.find_first_not_of('-');
  if (start == std::string::npos) return "";  // "---": no name to match
  const std::string name = given.substr(start, given.find('=', start) - start);
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, name.size() / 3) + 1;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& candidate : opt->get_lnames()) {
      std::size_t d = edit_distance(name, candidate);
      const bool affix = !name.empty() && (candidate.rfind(name, 0) == 0 || name.rfind(candidate, 0) == 0);
      if (affix) d = std::min<std::size_t>(d, 1);
      if (d < best_distance) best_distance = d, best = "--" + candidate;
    }
  }
  return best;
}

// The full name of a (sub)command: "lmcore codegen list".
inline std::string command_name(const CLI::App& app) {
  std::string name = app.get_name();
  for (const CLI::App* up = app.get_parent(); up != nullptr; up = up->get_parent()) name = up->get_name() + " " + name;
  return name;
}

// The (sub)command left holding arguments it did not take, or nullptr.
inline const CLI::App* holder_of_extras(const CLI::App& app) {
  const CLI::App* owner = app.remaining().empty() ? nullptr : &app;
  for (const CLI::App* sub : app.get_subcommands())
    if (!sub->remaining().empty()) owner = sub;
  return owner;
}

// CLI11 2.1 says "The following arguments were not expected: x --out-dir" (in reverse order, without
// the command's name); this names each argument in order, with the option meant: " unknown option
// '--out-dir' (did you mean --out?); unexpected argument 'x';".
inline std::string unexpected_arguments(const CLI::App& owner) {
  std::string message;
  bool after_separator = false;  // past "--" every argument is a positional one
  for (const std::string& arg : owner.remaining()) {
    if (arg == "--" && !after_separator) {
      after_separator = true;
      continue;
    }
    if (!after_separator && arg.size() > 1 && arg[0] == '-') {
      message += " unknown option '" + arg + "'";
      if (const std::string meant = closest_option(owner, arg); !meant.empty()) message += " (did you mean " + meant + "?)";
    } else {
      message += " unexpected argument '" + arg + "'";
    }
    message += ";";
  }
  return message;
}

// The exit code when the command must stop after parsing (0: help or version printed; 2: usage
// error), or nullopt to go on.
inline std::optional<int> parse_args(CLI::App& app, int argc, const char* const* argv) {
  check_integer_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError&) {
    const CLI::App& owner = holder_of_extras(app) ? *holder_of_extras(app) : app;
    const std::string command = command_name(owner);
    std::fprintf(stderr, "%s:%s `%s --help` lists the options\n", command.c_str(), unexpected_arguments(owner).c_str(),
                 command.c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help: prints the options
    // Any other usage error, named by the (sub)command it belongs to (CLI11's own text has no name).
    // CLI11 checks values and required options before it looks for arguments nobody took, so those
    // are named here too: one run shows every mistake on the line.
    const CLI::App* owner = &app;
    for (const CLI::App* sub : app.get_subcommands())
      if (sub->parsed()) owner = sub;
    const std::string command = command_name(*owner);
    const CLI::App* extras = holder_of_extras(app);
    const std::string also = extras ? unexpected_arguments(*extras) : "";
    std::fprintf(stderr, "%s: %s;%s `%s --help` lists the options\n", command.c_str(), e.what(), also.c_str(),
                 command.c_str());
    return 2;
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
