// lmcore bench upgrade [TREE] — wall time of `lmcore upgrade-check` over the torch 1.13 Python tree
// (default /usr/lib/python3/dist-packages/torch; --quick too) beside grep doing the same work in the
// same run: reading the same .py files and searching them for the names the rules look for,
//
//   grep -rnE --include='*.py' '<kGrepPattern>' TREE > /dev/null
//
// Every command runs as a child process with its output to /dev/null, page cache warm (one untimed
// round first). Rounds are interleaved (grep, lmcore, lmcore --threads 1, grep, ...) so that a busy
// machine weighs on all of them alike, and each command's best round is compared (its median is
// shown too). CPU is user+sys of the child in its best round. The ratio is lmcore's best wall time
// over grep's; the target is 1.5 or less. Findings are checked identical to a run that tokenizes
// every file (--no-prefilter), so the speed does not come from skipping a finding. Without --quick
// a generated tree ten times larger (ten copies of the .py files in a temp folder) is measured too.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "bench/suites/bench_suite.h"
#include "lmcore/core/parallel.h"
#include "lmcore/upgrade/scan.h"

namespace lmcore::bench {

namespace {

namespace fs = std::filesystem;

// The names the rules look for, as one ERE: what a user would grep for instead.
constexpr const char* kGrepPattern =
    "all_gather_into_tensor|reduce_scatter_tensor|all_gather_tensor|\\.names\\b|refine_names|\\.rename_?\\(|"
    "align_to|align_as|has_names|names=|align_tensors|unflatten|dim=";

double child_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct Command {
  std::string label, line;
  std::vector<double> wall, cpu;
  double best_wall() const { return *std::min_element(wall.begin(), wall.end()); }
  double best_cpu() const { return cpu[static_cast<std::size_t>(std::min_element(wall.begin(), wall.end()) - wall.begin())]; }
  double median_wall() const {
    std::vector<double> w = wall;
    std::sort(w.begin(), w.end());
    return w[w.size() / 2];
  }
};

void run_once(Command& c, bool record) {
  const double c0 = child_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = std::system(c.line.c_str());
  (void)rc;  // 1 means "found something" for both tools
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!record) return;
  c.wall.push_back(wall);
  c.cpu.push_back(child_cpu_seconds() - c0);
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string load_average() {
  std::array<double, 3> l{};
  if (getloadavg(l.data(), 3) != 3) return "unknown";
  return fmt::format("{:.2f} {:.2f} {:.2f}", l[0], l[1], l[2]);
}

std::size_t copy_py_tree(const fs::path& from, const fs::path& to) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(from)) {
    if (!e.is_regular_file() || e.path().extension() != ".py") continue;
    const fs::path dst = to / fs::relative(e.path(), from);
    fs::create_directories(dst.parent_path());
    fs::copy_file(e.path(), dst, fs::copy_options::overwrite_existing);
    ++n;
  }
  return n;
}

}  // namespace

std::vector<BenchTable> run_upgrade_suite(const BenchOptions& options) {
  const fs::path tree = options.args.empty() ? fs::path("/usr/lib/python3/dist-packages/torch") : fs::path(options.args[0]);
  const int rounds = options.quick ? 5 : 11;
  BenchTable table{fmt::format("upgrade: upgrade-check vs grep over the same .py files, interleaved rounds, best of {} "
                               "(median beside it)",
                               rounds),
                   {"tree", ".py files", "MB", "command", "best s", "median s", "cpu s (best round)", "vs grep",
                    "findings", "same as --no-prefilter"},
                   {},
                   {}};
  if (!options.args.empty() && !fs::is_directory(tree))  // asked for by name: a usage error, not a skip
    throw BenchUsageError(fmt::format("bench upgrade: TREE '{}' is not a directory{}", tree.string(),
                                      fs::exists(tree) ? "" : " (it does not exist)"));
  if (!fs::is_directory(tree)) {
    table.notes.push_back(fmt::format("{} not found: nothing measured (pass a tree: lmcore bench upgrade DIR)", tree.string()));
    return {table};
  }
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  const std::string load_before = load_average();

  auto measure = [&](const std::string& label, const fs::path& root) {
    std::size_t files = 0, bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && e.path().extension() == ".py") ++files, bytes += e.file_size();
    const std::string r = root.string();
    std::vector<Command> cmds = {
        {"grep -rnE --include='*.py'", fmt::format("grep -rnE --include='*.py' '{}' '{}' > /dev/null", kGrepPattern, r),
         {}, {}},
        {fmt::format("lmcore ({} threads)", num_threads()),
         fmt::format("'{}' upgrade-check --no-cuda-env -q --format json '{}' > /dev/null", self, r), {}, {}},
        {"lmcore --threads 1",
         fmt::format("'{}' upgrade-check --threads 1 --no-cuda-env -q --format json '{}' > /dev/null", self, r), {}, {}},
    };
    for (auto& c : cmds) run_once(c, false);  // warm the page cache
    for (int k = 0; k < rounds; ++k)
      for (auto& c : cmds) run_once(c, true);

    // The findings, and the same with every file tokenized.
    const fs::path out = fs::temp_directory_path() / fmt::format("lmcore_bench_upgrade_{}", ::getpid());
    (void)std::system(fmt::format("'{}' upgrade-check --no-cuda-env -q --select UPG1,UPG2 '{}' > '{}.fast'", self, r,
                                  out.string()).c_str());
    (void)std::system(fmt::format("'{}' upgrade-check --no-cuda-env -q --select UPG1,UPG2 --no-prefilter '{}' > '{}.full'",
                                  self, r, out.string()).c_str());
    const std::string fast = read_all(out.string() + ".fast"), full = read_all(out.string() + ".full");
    fs::remove(out.string() + ".fast", ec);
    fs::remove(out.string() + ".full", ec);
    const auto findings = static_cast<std::int64_t>(std::count(fast.begin(), fast.end(), '\n'));
    const double grep_best = cmds[0].best_wall();
    for (const auto& c : cmds) {
      const bool ours = c.label.rfind("lmcore", 0) == 0;
      table.rows.push_back({label, files, static_cast<double>(bytes) / 1e6, c.label, c.best_wall(), c.median_wall(),
                            c.best_cpu(), c.best_wall() / grep_best, ours ? nlohmann::json(findings) : nlohmann::json("-"),
                            ours ? nlohmann::json(fast == full ? "yes" : "NO") : nlohmann::json("-")});
    }
  };

  measure("torch 1.13", tree);
  if (!options.quick) {
    const fs::path big = fs::temp_directory_path() / fmt::format("lmcore_bench_upgrade_tree_{}", ::getpid());
    fs::remove_all(big);
    for (int k = 0; k < 10; ++k) copy_py_tree(tree, big / fmt::format("copy{}", k) / "torch");
    measure("torch x10 (generated)", big);
    fs::remove_all(big);
  }
  table.notes.push_back(fmt::format("grep pattern: {}", kGrepPattern));
  table.notes.push_back(fmt::format("CPU: {}; {} cores; load average before {}, after {}", cpu_model(),
                                    std::max(1u, std::thread::hardware_concurrency()), load_before, load_average()));
  table.notes.push_back("target: lmcore's best wall time at most 1.5x grep's in the same run; grep is single-threaded");
  table.notes.push_back(
      "lmcore tokenizes only the files its byte prefilter passes (see may_have_python_findings); the last column "
      "compares its UPG1xx/UPG2xx findings with a run that tokenizes every file");
  return {table};
}

}  // namespace lmcore::bench
