// --fix and --diff of upgrade-check: byte edits, unified diffs, atomic replacement of files.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "lmcore/base/atomic_file.h"
#include "lmcore/base/error.h"
#include "lmcore/base/file.h"
#include "lmcore/upgrade/scan.h"

namespace lmcore::upgrade {

namespace fs = std::filesystem;

std::string apply_edits(std::string_view text, std::vector<Edit> edits) {
  std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.begin < b.begin; });
  std::string out;
  out.reserve(text.size() + 64);
  std::uint32_t pos = 0;
  for (std::size_t i = 0; i < edits.size(); ++i) {
    const Edit& e = edits[i];
    if (i > 0 && e.begin == edits[i - 1].begin && e.end == edits[i - 1].end &&
        e.replacement == edits[i - 1].replacement)
      continue;  // the same edit from two findings
    LMCORE_CHECK(e.begin >= pos && e.end >= e.begin && e.end <= text.size(),
                 "upgrade-check: overlapping or out-of-range edit [{}, {}) (text of {} bytes, previous edit ends at {})",
                 e.begin, e.end, text.size(), pos);
    out.append(text.substr(pos, e.begin - pos));
    out.append(e.replacement);
    pos = e.end;
  }
  out.append(text.substr(pos));
  return out;
}

namespace {

// Lines with their line breaks.
std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t e = s.find('\n', pos);
    e = e == std::string_view::npos ? s.size() : e + 1;
    out.push_back(s.substr(pos, e - pos));
    pos = e;
  }
  return out;
}

void diff_line(std::string& out, char mark, std::string_view line) {
  out += mark;
  out.append(line);
  if (line.empty() || line.back() != '\n') out += "\n\\ No newline at end of file\n";
}

}  // namespace

std::string unified_diff(const std::string& path, std::string_view before, std::string_view after) {
  if (before == after) return "";
  const auto a = split_lines(before), b = split_lines(after);
  std::string out = fmt::format("--- a/{}\n+++ b/{}\n", path, path);
  if (a.size() != b.size()) {
    // Not produced by renames; show the whole file as one hunk.
    out += fmt::format("@@ -1,{} +1,{} @@\n", a.size(), b.size());
    for (auto l : a) diff_line(out, '-', l);
    for (auto l : b) diff_line(out, '+', l);
    return out;
  }
  constexpr std::size_t context = 3;
  std::vector<std::size_t> changed;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) changed.push_back(i);
  std::size_t k = 0;
  while (k < changed.size()) {
    // Grow a hunk while the next change is within 2*context lines.
    std::size_t last = k;
    while (last + 1 < changed.size() && changed[last + 1] - changed[last] <= 2 * context) ++last;
    const std::size_t lo = changed[k] >= context ? changed[k] - context : 0;
    const std::size_t hi = std::min(a.size(), changed[last] + context + 1);
    out += fmt::format("@@ -{},{} +{},{} @@\n", lo + 1, hi - lo, lo + 1, hi - lo);
    for (std::size_t i = lo; i < hi;) {
      if (a[i] == b[i]) {
        diff_line(out, ' ', a[i++]);
        continue;
      }
      // A run of changed lines: all removals, then all additions (diff -u's layout).
      std::size_t j = i;
      while (j < hi && a[j] != b[j]) ++j;
      for (std::size_t m = i; m < j; ++m) diff_line(out, '-', a[m]);
      for (std::size_t m = i; m < j; ++m) diff_line(out, '+', b[m]);
      i = j;
    }
    k = last + 1;
  }
  return out;
}

FixReport apply_fixes(const ScanResult& result, bool write) {
  std::map<std::string, std::vector<Edit>> by_file;
  for (const auto& f : result.findings)
    if (f.fix) by_file[f.path].push_back(*f.fix);
  FixReport report;
  for (const auto& file : result.files) {
    auto it = by_file.find(file.display);
    if (it == by_file.end()) continue;
    try {
      const std::string before = base::read_file(file.path.string(), "upgrade-check --fix");
      if (content_hash(before) != file.content_hash) {
        report.errors.push_back(fmt::format("{}: changed since it was checked; not fixed", file.display));
        continue;
      }
      const std::string after = apply_edits(before, it->second);
      if (after == before) continue;
      report.diff += unified_diff(file.display, before, after);
      // Atomic and durable, keeping the file's mode; a symbolic link is refused, not replaced by a copy.
      if (write) base::write_file_atomically(file.path.string(), after, {.what = "upgrade-check --fix", .keep_mode = true});
      ++report.files_changed;
      report.edits += it->second.size();
    } catch (const Error& e) {
      report.errors.push_back(e.what());
    }
  }
  return report;
}

}  // namespace lmcore::upgrade
