// lmcore bench [--quick] [--json] [SUITE [ARGS...]] — runs benchmark suites and prints their tables.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/suites/bench_suite.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_bench(int argc, char** argv) {
  CLI::App app{"Benchmark tables. Without a suite, runs every suite (use --quick for the short subset).",
               "lmcore bench"};
  bool quick = false, json = false;
  std::vector<std::string> positional;
  app.add_flag("--quick", quick, "short subset of each suite");
  app.add_flag("--json", json, "print JSON instead of tables");
  app.add_option("suite", positional, "suite name followed by suite arguments")->expected(-1);
  app.allow_extras();
  CLI11_PARSE(app, argc, argv);

  bench::BenchOptions options;
  options.quick = quick;
  std::vector<const bench::BenchSuite*> selected;
  if (positional.empty()) {
    for (const auto& s : bench::all_suites()) selected.push_back(&s);
  } else {
    for (const auto& s : bench::all_suites())
      if (s.name == positional[0]) selected.push_back(&s);
    if (selected.empty()) {
      std::string names;
      for (const auto& s : bench::all_suites()) names += " " + s.name;
      fmt::print(stderr, "lmcore bench: unknown suite '{}' (suites:{})\n", positional[0], names);
      return 2;
    }
    options.args.assign(positional.begin() + 1, positional.end());
  }
  for (const auto& extra : app.remaining()) options.args.push_back(extra);

  std::vector<bench::BenchTable> all;
  for (const auto* suite : selected) {
    auto tables = suite->run(options);
    if (!json) fmt::print("{}", bench::format_tables(tables));
    std::fflush(stdout);
    all.insert(all.end(), tables.begin(), tables.end());
  }
  if (json) fmt::print("{}\n", bench::tables_to_json(all).dump(2));
  return 0;
}

}  // namespace lmcore::cli
