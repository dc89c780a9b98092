// lmcore/upgrade/scan.h — walks files and folders, checks each file in parallel, and applies fixes.
// This is `lmcore upgrade-check` without the argument parsing.
//
//   upgrade::ScanOptions opt;
//   opt.paths = {"src", "notebooks/train.ipynb"};
//   upgrade::ScanResult r = upgrade::scan(opt);
//   fmt::print("{}", upgrade::format_findings(r.findings, upgrade::OutputFormat::text));
//   upgrade::apply_fixes(r, /*write=*/true);            // --fix
//
// What is checked: *.py / *.pyw (UPG1xx, UPG2xx), *.ipynb code cells (the same, plus `!pip` lines
// for UPG303..306), and pin files (requirements*.txt, *.yml, Dockerfile*, *.sh, pyproject.toml, ...
// see cuda_check.h). Folders skipped by default (unless named on the command line): version control,
// virtualenvs (also any folder holding pyvenv.cfg), caches, build outputs, node_modules, site-packages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lmcore/upgrade/rules.h"

namespace lmcore::upgrade {

struct ScanOptions {
  std::vector<std::string> paths;       // files or folders; relative ones resolve against `base`
  std::filesystem::path base;           // empty: the current directory
  std::vector<std::string> excludes;    // fnmatch(3) globs, matched against each path component
                                        // and against the path relative to the scanned folder
  bool default_excludes = true;
  int threads = 0;                      // 0: lmcore::num_threads()
  Confidence min_confidence = Confidence::medium;  // low: also named-tensor findings with no evidence of
                                                  // torch (see python_check.h)
  std::vector<std::string> select;      // code prefixes to keep (empty: all)
  std::vector<std::string> ignore;      // code prefixes to drop
  bool prefilter = true;                // skip tokenizing Python files that cannot give a finding
                                        // (may_have_python_findings); false also reports syntax and
                                        // encoding errors (UPG902/903) in those files
};

// What was read from one file, so that fixes apply to exactly the bytes that were checked.
struct ScannedFile {
  std::string display;              // path as shown in findings
  std::filesystem::path path;       // path on disk
  std::uint64_t content_hash = 0;   // of the bytes checked
  bool notebook = false;
};

struct ScanResult {
  std::vector<Finding> findings;    // sorted with finding_less
  std::vector<ScannedFile> files;   // every file checked, in display order
  std::size_t python_files = 0, notebooks = 0, pin_files = 0;
};

// Throws lmcore::Error when a path given in `paths` does not exist (a usage error); a file that
// cannot be read is a UPG901 finding and the scan goes on.
ScanResult scan(const ScanOptions& options);

// The filters of `options` (min_confidence, select, ignore) applied to one finding: scan() applies
// them to what it finds, callers to findings from elsewhere (the CUDA probe). Scan errors (UPG9xx)
// pass unless ignored.
bool finding_selected(const Finding& f, const ScanOptions& options);

// The default folder names skipped during the walk.
const std::vector<std::string>& default_excluded_dirs();

// True when `name` (a path component) or `relative` (the path under the scanned folder) matches one
// of the globs.
bool path_excluded(const std::string& name, const std::string& relative, const std::vector<std::string>& globs);

struct FixReport {
  std::size_t files_changed = 0, edits = 0;
  std::string diff;                 // unified diff of every change (always computed)
  std::vector<std::string> errors;  // files that changed since the scan, or could not be written
};

// Applies every finding's edit. With write=true, each changed file is replaced atomically (temp file
// in the same folder, fsync, rename, keeping the file's mode); with write=false nothing is written
// and only the diff is produced. Notebook edits are on the .ipynb text itself (see notebook.h).
FixReport apply_fixes(const ScanResult& result, bool write);

// Applies edits (sorted, non-overlapping; duplicates are merged) to `text`.
std::string apply_edits(std::string_view text, std::vector<Edit> edits);

// Unified diff (3 lines of context) between two texts whose line breaks are in the same places, as
// produced by identifier renames.
std::string unified_diff(const std::string& path, std::string_view before, std::string_view after);

// A 64-bit hash of the bytes (FNV-1a over words), to detect a file changed between check and fix.
std::uint64_t content_hash(std::string_view bytes);

}  // namespace lmcore::upgrade
