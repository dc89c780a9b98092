#include "bench/suites/bench_suite.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lmcore/core/error.h"

namespace lmcore::bench {

double time_median(const std::function<void()>& fn, int repeats, double max_seconds) {
  using clock = std::chrono::steady_clock;
  fn();  // warm-up: page faults, thread pool start, caches
  std::vector<double> times;
  const auto start = clock::now();
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto t0 = clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (std::chrono::duration<double>(clock::now() - start).count() > max_seconds) break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

bool section_wanted(const BenchOptions& options, const std::string& section) {
  return options.sections.empty() ||
         std::find(options.sections.begin(), options.sections.end(), section) != options.sections.end();
}

namespace {

bool is_positional(const BenchArg& a) { return a.form.empty() || a.form[0] != '-'; }

// A positional form in lower case is a keyword, taken as written ("rmsnorm"); one in upper case is a
// placeholder for any one word ("TREE").
bool is_keyword(const BenchArg& a) {
  return is_positional(a) && std::none_of(a.form.begin(), a.form.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// Whether `word` is one of the suite's keywords.
bool is_keyword_of(const BenchSuite& suite, const std::string& word) {
  return std::any_of(suite.args.begin(), suite.args.end(), [&](const BenchArg& a) { return is_keyword(a) && a.form == word; });
}

// "--ranks=N[,N...]" -> "--ranks="; "--verbose" -> "--verbose".
std::string arg_key(const BenchArg& a) {
  const auto eq = a.form.find('=');
  return eq == std::string::npos ? a.form : a.form.substr(0, eq + 1);
}

}  // namespace

std::vector<std::string> section_keywords_in(const BenchSuite& suite, const std::vector<std::string>& args) {
  std::vector<std::string> given;
  for (const std::string& a : args)
    if (is_keyword_of(suite, a)) given.push_back(a);
  return given;
}

std::string check_suite_args(const BenchSuite& suite, const std::vector<std::string>& args) {
  std::size_t positionals = 0;
  const std::size_t positional_slots = static_cast<std::size_t>(std::count_if(
      suite.args.begin(), suite.args.end(), [&](const BenchArg& a) { return is_positional(a) && !is_keyword(a); }));
  for (const std::string& given : args) {
    bool ok = false;
    if (!given.empty() && given[0] == '-') {
      for (const BenchArg& a : suite.args) {
        if (is_positional(a)) continue;
        const std::string key = arg_key(a);
        ok = key.back() == '=' ? given.rfind(key, 0) == 0 && given.size() > key.size() : given == key;
        if (ok) break;
      }
    } else {
      ok = is_keyword_of(suite, given) || ++positionals <= positional_slots;
    }
    if (!ok) {
      std::string takes;
      for (const BenchArg& a : suite.args)
        if (!a.help.empty()) takes += " " + a.form;
      return fmt::format("bench {}: unknown argument '{}'; {} takes{}", suite.name, given, suite.name,
                         takes.empty() ? std::string(" no arguments") : ":" + takes);
    }
  }
  return "";
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

namespace {

// The whole of `text` as an integer in [lo, hi], or nullopt.
std::optional<std::int64_t> whole_integer(const std::string& text, std::int64_t lo, std::int64_t hi) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || end != text.c_str() + text.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace

std::int64_t int_arg(const std::string& suite, const std::string& arg, const std::string& prefix, std::int64_t lo,
                     std::int64_t hi) {
  const std::string text = arg.substr(prefix.size());
  if (const auto v = whole_integer(text, lo, hi)) return *v;
  throw BenchUsageError(fmt::format("bench {}: {}: expected an integer in [{}, {}], found '{}'", suite, arg, lo, hi, text));
}

std::vector<std::int64_t> int_list_arg(const std::string& suite, const std::string& arg, const std::string& prefix,
                                       std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> out;
  const std::vector<std::string> items = split_commas(arg.substr(prefix.size()));
  for (const std::string& item : items)
    if (const auto v = whole_integer(item, lo, hi)) out.push_back(*v);
  if (out.empty() || out.size() != items.size())
    throw BenchUsageError(fmt::format("bench {}: {}: expected integers in [{}, {}] separated by commas", suite, arg, lo, hi));
  return out;
}

std::vector<std::string> name_list_arg(const std::string& suite, const std::string& arg, const std::string& prefix,
                                       const std::vector<std::string>& choices) {
  std::vector<std::string> out = split_commas(arg.substr(prefix.size()));
  const bool ok = !out.empty() && std::all_of(out.begin(), out.end(), [&](const std::string& n) {
    return std::find(choices.begin(), choices.end(), n) != choices.end();
  });
  if (!ok)
    throw BenchUsageError(fmt::format("bench {}: {}: expected one or more of {} separated by commas", suite, arg,
                                      fmt::join(choices, ", ")));
  return out;
}

std::string name_arg(const std::string& suite, const std::string& arg, const std::string& prefix,
                     const std::vector<std::string>& choices) {
  const std::string name = arg.substr(prefix.size());
  if (std::find(choices.begin(), choices.end(), name) == choices.end())
    throw BenchUsageError(fmt::format("bench {}: {}: expected one of {}", suite, arg, fmt::join(choices, ", ")));
  return name;
}

std::string suite_help(const BenchSuite& suite) {
  std::string out = fmt::format("lmcore bench [--quick] [--json] {} [ARGS...]\n  {}\n", suite.name, suite.description);
  std::size_t width = 0;
  for (const BenchArg& a : suite.args) width = std::max(width, a.form.size());
  if (std::none_of(suite.args.begin(), suite.args.end(), [](const BenchArg& a) { return !a.help.empty(); }))
    return out + "\n" + suite.name + " takes no arguments besides --quick and --json.\n";
  out += "\nARGS:\n";
  for (const BenchArg& a : suite.args)
    if (!a.help.empty()) out += fmt::format("  {:<{}}  {}\n", a.form, width, a.help);
  return out;
}

namespace {

std::string cell_text(const nlohmann::json& cell) {
  if (cell.is_string()) return cell.get<std::string>();
  if (cell.is_number_integer()) return fmt::format("{}", cell.get<long long>());
  if (cell.is_number_float()) {
    const double v = cell.get<double>();
    const double a = v < 0 ? -v : v;
    if (a != 0 && (a >= 1e6 || a < 1e-3)) return fmt::format("{:.3e}", v);
    if (a >= 100) return fmt::format("{:.1f}", v);
    return fmt::format("{:.3f}", v);
  }
  if (cell.is_null()) return "-";
  return cell.dump();
}

}  // namespace

std::string format_tables(const std::vector<BenchTable>& tables) {
  std::string out;
  for (const auto& t : tables) {
    std::vector<std::size_t> width(t.columns.size(), 0);
    for (std::size_t c = 0; c < t.columns.size(); ++c) width[c] = t.columns[c].size();
    std::vector<std::vector<std::string>> text;
    for (const auto& row : t.rows) {
      std::vector<std::string> r;
      for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
        r.push_back(cell_text(row[c]));
        width[c] = std::max(width[c], r.back().size());
      }
      text.push_back(std::move(r));
    }
    out += fmt::format("== {} ==\n", t.title);
    for (std::size_t c = 0; c < t.columns.size(); ++c)
      out += fmt::format("{}{:>{}}", c ? "  " : "", t.columns[c], width[c]);
    out += "\n";
    for (const auto& r : text) {
      for (std::size_t c = 0; c < r.size(); ++c) out += fmt::format("{}{:>{}}", c ? "  " : "", r[c], width[c]);
      out += "\n";
    }
    for (const auto& n : t.notes) out += "  " + n + "\n";
    out += "\n";
  }
  return out;
}

nlohmann::json tables_to_json(const std::vector<BenchTable>& tables) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& t : tables) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : t.rows) {
      nlohmann::json obj = nlohmann::json::object();
      for (std::size_t c = 0; c < row.size() && c < t.columns.size(); ++c) obj[t.columns[c]] = row[c];
      rows.push_back(obj);
    }
    arr.push_back({{"title", t.title}, {"columns", t.columns}, {"rows", rows}, {"notes", t.notes}});
  }
  return arr;
}

double time_best(const std::function<void()>& fn, double budget_seconds) {
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  fn();  // warm-up: primitive creation, page faults, thread pool start
  auto t0 = clock::now();
  fn();
  const double once = std::max(seconds_since(t0), 1e-7);
  const int inner = std::max(1, static_cast<int>(0.02 / once));
  double best = once;
  const auto start = clock::now();
  for (int samples = 0; samples < 3 || (seconds_since(start) < budget_seconds && samples < 200); ++samples) {
    t0 = clock::now();
    for (int i = 0; i < inner; ++i) fn();
    best = std::min(best, seconds_since(t0) / inner);
  }
  return best;
}

nlohmann::json run_python_peer(const std::string& script, const std::string& args) {
  const std::string cmd = fmt::format("/usr/bin/python3 {}/bench/{} {} 2>&1", LMCORE_SOURCE_DIR, script, args);
  FILE* f = ::popen(cmd.c_str(), "r");
  LMCORE_CHECK(f != nullptr, "bench: could not start '{}'", cmd);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  const int rc = ::pclose(f);
  const auto brace = out.rfind('{');
  nlohmann::json j = brace == std::string::npos ? nlohmann::json() : nlohmann::json::parse(out.substr(brace), nullptr, false);
  LMCORE_CHECK(rc == 0 && j.is_object(), "bench: '{}' failed (exit status {}): {}", cmd, rc, out.substr(0, 600));
  return j;
}

FreshRun run_bench_in_fresh_process(const std::string& suite, const std::string& arg) {
  int fds[2];
  LMCORE_CHECK(::pipe(fds) == 0, "bench {}: pipe() failed", suite);
  const pid_t pid = ::fork();
  LMCORE_CHECK(pid >= 0, "bench {}: fork() failed", suite);
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    char exe[] = "/proc/self/exe", bench[] = "bench";
    std::string s = suite, a = arg;  // execv wants mutable strings
    char* argv[] = {exe, bench, s.data(), a.data(), nullptr};
    ::execv(exe, argv);
    ::_exit(127);
  }
  ::close(fds[1]);
  FreshRun r;
  char buf[4096];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) r.output.append(buf, static_cast<std::size_t>(k));
  ::close(fds[0]);
  rusage usage{};
  LMCORE_CHECK(::wait4(pid, &r.status, 0, &usage) == pid, "bench {}: wait4 failed", suite);
  r.peak_rss_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;  // ru_maxrss is in KiB on Linux
  return r;
}

double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

}  // namespace lmcore::bench
