// lmcore bench upgrade [TREE] — wall time of `lmcore upgrade-check` over the torch 1.13 Python tree
// (default /usr/lib/python3/dist-packages/torch) and over a generated tree ten times larger (ten
// copies of its .py files in a temp folder), beside `grep -rnE` for the same names in the same run.
// Both are run as child processes with output to /dev/null, page cache warm (one untimed run
// first), and timed as the median of 3 runs; CPU is user+sys of the child. --quick: the torch tree
// only, one timed run each.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

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

struct Timing {
  double wall = 0, cpu = 0;
};

Timing time_command(const std::string& cmd, int repeats) {
  (void)std::system(cmd.c_str());  // warm the page cache
  std::vector<double> cpu;
  const double wall = time_median(
      [&] {
        const double c0 = child_cpu_seconds();
        const int rc = std::system(cmd.c_str());
        (void)rc;  // 1 means "found something" for both tools
        cpu.push_back(child_cpu_seconds() - c0);
      },
      repeats, 120.0);
  std::sort(cpu.begin(), cpu.end());
  return {wall, cpu.empty() ? 0.0 : cpu[cpu.size() / 2]};
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
  BenchTable table{"upgrade: upgrade-check vs grep -rnE (same names), wall and CPU (median of 3; --quick: 1 run)",
                   {"tree", ".py files", "MB", "lmcore s", "grep s", "wall ratio", "lmcore cpu s", "grep cpu s",
                    "in-process s", "findings"},
                   {},
                   {}};
  if (!fs::is_directory(tree)) {
    table.notes.push_back(fmt::format("{} not found: nothing measured (pass a tree: lmcore bench upgrade DIR)", tree.string()));
    return {table};
  }
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  const int repeats = options.quick ? 1 : 3;  // --quick stays within a few seconds

  auto measure = [&](const std::string& label, const fs::path& root) {
    std::size_t files = 0, bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && e.path().extension() == ".py") ++files, bytes += e.file_size();
    const Timing ours = time_command(
        fmt::format("'{}' upgrade-check --no-cuda-env -q --format json '{}' > /dev/null", self, root.string()), repeats);
    const Timing grep = time_command(
        fmt::format("grep -rnE --include='*.py' '{}' '{}' > /dev/null", kGrepPattern, root.string()), repeats);
    upgrade::ScanOptions opt;
    opt.paths = {root.string()};
    std::size_t findings = 0;
    const double inproc = time_median([&] { findings = upgrade::scan(opt).findings.size(); }, repeats, 120.0);
    table.rows.push_back({label, files, static_cast<double>(bytes) / 1e6, ours.wall, grep.wall, ours.wall / grep.wall,
                          ours.cpu, grep.cpu, inproc, findings});
  };

  measure("torch 1.13", tree);
  if (!options.quick) {
    const fs::path big = fs::temp_directory_path() / fmt::format("lmcore_bench_upgrade_{}", ::getpid());
    fs::remove_all(big);
    for (int k = 0; k < 10; ++k) copy_py_tree(tree, big / fmt::format("copy{}", k) / "torch");
    measure("torch x10 (generated)", big);
    fs::remove_all(big);
  }
  table.notes.push_back(fmt::format("lmcore threads: {} (LMCORE_NUM_THREADS); grep is single-threaded", num_threads()));
  table.notes.push_back(fmt::format("grep pattern: {}", kGrepPattern));
  table.notes.push_back("target: lmcore wall within 2x of grep's; lmcore tokenizes every file (syntax errors are reported)");
  return {table};
}

}  // namespace lmcore::bench
