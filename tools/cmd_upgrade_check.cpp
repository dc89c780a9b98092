// lmcore upgrade-check [PATH...] — finds what PyTorch 2.13 removed or renamed (UPG1xx, UPG2xx), fixes
// the renames (--fix, --diff), and checks CUDA >= 13.0 installed and pinned (UPG3xx).
// Exit codes (as ruff): 0 no findings, 1 findings, 2 usage or internal error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "lmcore/core/error.h"
#include "lmcore/upgrade/cuda_check.h"
#include "lmcore/upgrade/report.h"
#include "lmcore/upgrade/scan.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

namespace {

std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    std::stringstream ss(item);
    std::string part;
    while (std::getline(ss, part, ','))
      if (!part.empty()) out.push_back(part);
  }
  return out;
}

}  // namespace

int run_upgrade_check(int argc, char** argv) {
  CLI::App app{"Find what PyTorch 2.13 removed or renamed in Python code and notebooks, fix the renames, "
               "and check for CUDA 13.0 or later. Exit: 0 clean, 1 findings, 2 usage/internal error.",
               "lmcore upgrade-check"};
  std::vector<std::string> paths, excludes, select, ignore, cuda_roots;
  std::string format = "text", min_conf = "medium";
  bool fix = false, diff = false, rules = false, no_default_excludes = false, no_cuda_env = false, stats = false,
       quiet = false, no_prefilter = false;
  int threads = 0;
  app.add_option("paths", paths, "files and folders to check (default: .)");
  app.add_option("--format", format, "text | json | sarif | github")->capture_default_str();
  app.add_flag("--fix", fix, "rewrite the renames (UPG1xx) in place, atomically");
  app.add_flag("--diff", diff, "print the fixes as a unified diff; write nothing");
  app.add_flag("--rules", rules, "list the rule codes with explanations and exit");
  // allow_extra_args(false): each occurrence takes one value, so a path after it stays a path.
  app.add_option("--exclude", excludes, "glob of files/folders to skip (repeatable, or comma-separated)")
      ->allow_extra_args(false);
  app.add_flag("--no-default-excludes", no_default_excludes,
               "also walk virtualenvs, caches, build and dist folders");
  app.add_option("--select", select, "only these code prefixes (e.g. UPG1,UPG203)")->allow_extra_args(false);
  app.add_option("--ignore", ignore, "drop these code prefixes")->allow_extra_args(false);
  app.add_option("--min-confidence", min_conf,
                 "low | medium | high: drop named-tensor findings below this (low: also those with no evidence "
                 "of a tensor: receiver unknown and torch not imported by the file or the modules it imports)")
      ->capture_default_str();
  app.add_flag("--no-prefilter", no_prefilter,
               "tokenize every Python file, also those that name none of the removed or renamed APIs (they can "
               "give no finding; this also reports their syntax and encoding errors, and is slower)");
  app.add_option("--threads", threads, "worker threads (0: LMCORE_NUM_THREADS or cores)")
      ->check(thread_count())
      ->capture_default_str();
  app.add_flag("--no-cuda-env", no_cuda_env, "do not probe the installed CUDA toolkit/runtime");
  app.add_option("--cuda-root", cuda_roots, "probe these CUDA install folders instead of the default places")
      ->allow_extra_args(false);
  app.add_flag("--statistics", stats, "print the number of findings per code (to stderr) after the findings");
  app.add_flag("-q,--quiet", quiet, "no summary line on stderr");
  LMCORE_PARSE_ARGS(app, argc, argv);
  if (rules) {
    fmt::print("{}", upgrade::format_rules());
    return 0;
  }
  const auto out_format = upgrade::output_format_from_name(format);
  if (!out_format) {
    fmt::print(stderr, "lmcore upgrade-check: --format '{}' is not one of text, json, sarif, github\n", format);
    return 2;
  }
  if (fix && diff) {
    fmt::print(stderr, "lmcore upgrade-check: --fix and --diff are exclusive (--diff writes nothing)\n");
    return 2;
  }
  upgrade::ScanOptions opt;
  opt.paths = paths.empty() ? std::vector<std::string>{"."} : paths;
  opt.excludes = split_commas(excludes);
  opt.default_excludes = !no_default_excludes;
  opt.select = split_commas(select);
  opt.ignore = split_commas(ignore);
  opt.threads = threads;
  opt.prefilter = !no_prefilter;
  if (const auto c = upgrade::confidence_from_name(min_conf)) {
    opt.min_confidence = *c;
  } else {
    fmt::print(stderr, "lmcore upgrade-check: --min-confidence '{}' is not one of low, medium, high\n", min_conf);
    return 2;
  }

  upgrade::ScanResult result;
  try {
    result = upgrade::scan(opt);
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore upgrade-check: {}\n", e.what());
    return 2;
  }

  std::string cuda_summary;
  if (!no_cuda_env) {
    std::vector<std::filesystem::path> roots(cuda_roots.begin(), cuda_roots.end());
    const auto found = upgrade::probe_cuda(roots);
    for (const auto& c : found)
      cuda_summary += fmt::format("{}cuda {} {} ({}, {})", cuda_summary.empty() ? "" : "; ", c.component, c.version,
                                  c.source, c.path);
    if (found.empty()) cuda_summary = "cuda: no toolkit or runtime found";
    for (auto& f : upgrade::cuda_component_findings(found))
      if (upgrade::finding_selected(f, opt)) result.findings.push_back(std::move(f));
    std::sort(result.findings.begin(), result.findings.end(), upgrade::finding_less);
  }

  std::size_t fixable = 0;
  for (const auto& f : result.findings) fixable += f.fix.has_value();

  int exit_code = result.findings.empty() ? 0 : 1;
  if (fix || diff) {
    const upgrade::FixReport rep = upgrade::apply_fixes(result, /*write=*/fix);
    for (const auto& e : rep.errors) fmt::print(stderr, "lmcore upgrade-check: {}\n", e);
    if (diff) {
      fmt::print("{}", rep.diff);
    } else {
      // What is left after fixing is reported as usual.
      std::vector<upgrade::Finding> remaining;
      for (auto& f : result.findings)
        if (!f.fix || !rep.errors.empty()) remaining.push_back(f);
      fmt::print("{}", upgrade::format_findings(remaining, *out_format));
      exit_code = remaining.empty() ? 0 : 1;
      if (!quiet)
        fmt::print(stderr, "upgrade-check: fixed {} finding(s) in {} file(s); {} remaining\n", fixable,
                   rep.files_changed, remaining.size());
    }
    if (!rep.errors.empty()) exit_code = 2;
  } else {
    fmt::print("{}", upgrade::format_findings(result.findings, *out_format));
  }
  if (stats) {
    std::map<std::string, std::map<std::string, int>> counts;
    for (const auto& f : result.findings) ++counts[f.code][upgrade::confidence_name(f.confidence)];
    for (const auto& [code, by_conf] : counts) {
      int total = 0;
      std::string detail;
      for (const auto& [conf, n] : by_conf) {
        total += n;
        detail += fmt::format("{}{} {}", detail.empty() ? "" : ", ", n, conf);
      }
      const auto* rule = upgrade::find_rule(code);
      fmt::print(stderr, "{:6} {:>6}  ({})  {}\n", code, total, detail, rule ? rule->summary : "");
    }
  }
  if (!quiet && !(fix && !diff)) {
    fmt::print(stderr, "upgrade-check: {} finding(s) ({} fixable) in {} python file(s), {} notebook(s), {} pin file(s){}{}\n",
               result.findings.size(), fixable, result.python_files, result.notebooks, result.pin_files,
               cuda_summary.empty() ? "" : "; ", cuda_summary);
  }
  return exit_code;
}

}  // namespace lmcore::cli
