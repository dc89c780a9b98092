// The `lmcore bench` framework: each suite measures and returns tables; the CLI prints them as text
// or JSON. A suite lives in bench/suites/<name>.cpp and is listed in registry.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmcore/core/error.h"

namespace lmcore::bench {

struct BenchOptions {
  bool quick = false;                 // a short subset, for `lmcore bench --quick`
  std::vector<std::string> args;      // extra arguments after the suite name
  std::vector<std::string> sections;  // the suite's section keywords among args ("rmsnorm"); empty: all
};

// One table: a title, column names, rows of cells (numbers or strings), and notes printed below.
struct BenchTable {
  std::string title;
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;
  std::vector<std::string> notes;
};

// One argument a suite accepts after its name. `lmcore bench SUITE --help` lists them; any other
// argument is a usage error found before anything runs.
struct BenchArg {
  std::string form;  // "--ranks=N[,N...]": matched up to and including '='; without '-', a positional
  std::string help;  // what it does and its default; empty: internal (accepted, not listed)
};

struct BenchSuite {
  std::string name;
  std::string description;
  std::function<std::vector<BenchTable>(const BenchOptions&)> run;
  std::vector<BenchArg> args = {};
};

// The section keywords among `args`: those of the suite's positional forms written in lower case
// (codegen's "rmsnorm gemm ...", attention's "flex bf16 mask").
std::vector<std::string> section_keywords_in(const BenchSuite& suite, const std::vector<std::string>& args);
// Whether to run `section`: every section when options.sections is empty, else only those named.
bool section_wanted(const BenchOptions& options, const std::string& section);

// Checks a suite's arguments against its list: returns "" or a message naming the first one it does
// not take and listing those it does.
std::string check_suite_args(const BenchSuite& suite, const std::vector<std::string>& args);
// A suite argument it cannot use (a malformed or out-of-range value, an unknown name): `lmcore bench`
// prints the message with a pointer to the suite's --help and exits 2. Suites read their arguments
// with the readers below before they measure anything.
class BenchUsageError : public Error {
 public:
  using Error::Error;
};

// The items of a comma-separated list, empty ones dropped ("2,,4" -> {"2", "4"}).
std::vector<std::string> split_commas(const std::string& s);
// Readers of `arg`'s value after `prefix` ("--steps=" in "--steps=8"): a whole integer in [lo, hi], a
// non-empty comma-separated list of them, a name among `choices`, or a list of such names. Each throws
// BenchUsageError naming the suite, the argument and what it expects.
std::int64_t int_arg(const std::string& suite, const std::string& arg, const std::string& prefix, std::int64_t lo,
                     std::int64_t hi);
std::vector<std::int64_t> int_list_arg(const std::string& suite, const std::string& arg, const std::string& prefix,
                                       std::int64_t lo, std::int64_t hi);
std::vector<std::string> name_list_arg(const std::string& suite, const std::string& arg, const std::string& prefix,
                                       const std::vector<std::string>& choices);
std::string name_arg(const std::string& suite, const std::string& arg, const std::string& prefix,
                     const std::vector<std::string>& choices);

// The `lmcore bench SUITE --help` text: the description and every listed argument.
std::string suite_help(const BenchSuite& suite);

// Every suite, in the order `lmcore bench --quick` runs them.
const std::vector<BenchSuite>& all_suites();

// Prints tables as aligned text, or as a JSON array of {title, columns, rows, notes}.
std::string format_tables(const std::vector<BenchTable>& tables);
nlohmann::json tables_to_json(const std::vector<BenchTable>& tables);

// A steady clock's reading in seconds, for timing a span by subtraction.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median wall time in seconds of `fn` over `repeats` runs after one warm-up run; stops early once
// `max_seconds` have been spent (still at least one timed run).
double time_median(const std::function<void()>& fn, int repeats, double max_seconds = 10.0);

// Best seconds per call of `fn`: samples of back-to-back calls (each ~20 ms), for `budget_seconds`
// (at least 3 samples) after one warm-up call; the least disturbed sample on a shared machine.
double time_best(const std::function<void()>& fn, double budget_seconds);

// Runs `/usr/bin/python3 <LMCORE_SOURCE_DIR>/bench/<script> <args>` and parses the last JSON object it
// prints; throws lmcore::Error with the first lines of its output when it fails.
nlohmann::json run_python_peer(const std::string& script, const std::string& args);

// Runs `lmcore bench <suite> <arg>` as a fresh process: this executable re-executed after fork, so its
// peak RSS counts none of this process's pages and it starts its own thread pool. Returns what it
// printed on stdout, its wait status and its peak RSS in bytes.
struct FreshRun {
  std::string output;
  int status = -1;
  double peak_rss_bytes = 0;
};
FreshRun run_bench_in_fresh_process(const std::string& suite, const std::string& arg);

// The 1-minute load average (/proc/loadavg), for notes: figures from a shared machine need it.
double load_average_1min();

}  // namespace lmcore::bench
