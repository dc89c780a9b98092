// lmcore bench [--quick] [--json] [SUITE [ARGS...]] — runs benchmark suites and prints their tables.
// Every argument is checked before any suite runs: a misspelt option is a usage error (exit 2), not
// a reason to run the first suite and fail in the second.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/suites/bench_suite.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_bench(int argc, char** argv) {
  std::string suites_text;
  for (const auto& s : bench::all_suites()) suites_text += fmt::format("\n  {:<10} {}", s.name, s.description);
  CLI::App app{"Benchmark tables. Without a suite, runs every suite (use --quick for the short subset). "
               "`lmcore bench SUITE --help` lists the arguments SUITE takes.\n\nSuites:" + suites_text,
               "lmcore bench"};
  bool quick = false, json = false;
  app.add_flag("--quick", quick, "short subset of each suite (default: off)");
  app.add_flag("--json", json, "print JSON instead of tables (default: off)");
  // Everything from the first word that is not one of the options above (the suite name) on is the
  // suite's, checked below against its list.
  app.prefix_command();
  LMCORE_PARSE_ARGS(app, argc, argv);

  std::vector<std::string> rest = app.remaining();
  bench::BenchOptions options;
  std::vector<const bench::BenchSuite*> selected;
  if (rest.empty()) {
    for (const auto& s : bench::all_suites()) selected.push_back(&s);
  } else {
    if (rest[0].rfind('-', 0) == 0) {
      fmt::print(stderr, "lmcore bench: unknown option '{}' (lmcore bench --help lists the options and suites)\n",
                 rest[0]);
      return kUsageError;
    }
    for (const auto& s : bench::all_suites())
      if (s.name == rest[0]) selected.push_back(&s);
    if (selected.empty()) {
      std::string names;
      for (const auto& s : bench::all_suites()) names += " " + s.name;
      fmt::print(stderr, "lmcore bench: unknown suite '{}' (suites:{})\n", rest[0], names);
      return kUsageError;
    }
    for (std::size_t i = 1; i < rest.size(); ++i) {
      const std::string& a = rest[i];
      if (a == "--help" || a == "-h") {
        fmt::print("{}", bench::suite_help(*selected[0]));
        return 0;
      }
      if (a == "--quick") quick = true;
      else if (a == "--json") json = true;
      else options.args.push_back(a);
    }
    if (const std::string err = bench::check_suite_args(*selected[0], options.args); !err.empty()) {
      fmt::print(stderr, "lmcore {} (lmcore bench {} --help)\n", err, selected[0]->name);
      return kUsageError;
    }
    options.sections = bench::section_keywords_in(*selected[0], options.args);
  }
  options.quick = quick;

  std::vector<bench::BenchTable> all;
  for (const auto* suite : selected) {
    std::vector<bench::BenchTable> tables;
    try {
      tables = suite->run(options);
    } catch (const bench::BenchUsageError& e) {
      fmt::print(stderr, "lmcore {} (lmcore bench {} --help)\n", e.what(), suite->name);
      return kUsageError;
    } catch (const std::invalid_argument& e) {  // std::stoi and friends on a malformed value
      fmt::print(stderr, "lmcore bench {}: a malformed number in {} ({})\n", suite->name, fmt::join(options.args, " "),
                 e.what());
      return kUsageError;
    } catch (const std::out_of_range& e) {
      fmt::print(stderr, "lmcore bench {}: a number out of range in {} ({})\n", suite->name,
                 fmt::join(options.args, " "), e.what());
      return kUsageError;
    }
    if (!json) fmt::print("{}", bench::format_tables(tables));
    std::fflush(stdout);
    all.insert(all.end(), tables.begin(), tables.end());
  }
  if (json) fmt::print("{}\n", bench::tables_to_json(all).dump(2));
  return 0;
}

}  // namespace lmcore::cli
