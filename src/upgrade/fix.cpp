// --fix and --diff of upgrade-check: byte edits, unified diffs, atomic replacement of files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "lmcore/base/error.h"
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

namespace {

// Writes `data` next to `path`, fsyncs it, and renames it over `path` (keeping the mode), then
// fsyncs the folder so the rename itself is durable.
void write_atomic(const fs::path& path, std::string_view data) {
  struct stat st;
  LMCORE_CHECK(::stat(path.c_str(), &st) == 0, "{}: cannot stat: {}", path.string(), std::strerror(errno));
  std::string tmpl = (path.parent_path() / fmt::format(".{}.upgrade-XXXXXX", path.filename().string())).string();
  const int fd = ::mkstemp(tmpl.data());
  LMCORE_CHECK(fd >= 0, "{}: cannot create a temporary file beside it: {}", path.string(), std::strerror(errno));
  auto cleanup = [&](const std::string& what) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    ::unlink(tmpl.c_str());
    fail("{}: {}: {}", path.string(), what, err);
  };
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) cleanup("cannot write the temporary file");
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, st.st_mode & 07777) != 0) cleanup("cannot set the mode of the temporary file");
  if (::fsync(fd) != 0) cleanup("cannot fsync the temporary file");
  if (::close(fd) != 0) {
    ::unlink(tmpl.c_str());
    fail("{}: cannot close the temporary file: {}", path.string(), std::strerror(errno));
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmpl.c_str());
    fail("{}: cannot replace the file: {}", path.string(), err);
  }
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_all(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  LMCORE_CHECK(fd >= 0, "{}: cannot read: {}", p.string(), std::strerror(errno));
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      fail("{}: cannot read: {}", p.string(), err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

FixReport apply_fixes(const ScanResult& result, bool write) {
  std::map<std::string, std::vector<Edit>> by_file;
  for (const auto& f : result.findings)
    if (f.fix) by_file[f.path].push_back(*f.fix);
  FixReport report;
  for (const auto& file : result.files) {
    auto it = by_file.find(file.display);
    if (it == by_file.end()) continue;
    try {
      const std::string before = read_all(file.path);
      if (content_hash(before) != file.content_hash) {
        report.errors.push_back(fmt::format("{}: changed since it was checked; not fixed", file.display));
        continue;
      }
      const std::string after = apply_edits(before, it->second);
      if (after == before) continue;
      report.diff += unified_diff(file.display, before, after);
      if (write) write_atomic(file.path, after);
      ++report.files_changed;
      report.edits += it->second.size();
    } catch (const Error& e) {
      report.errors.push_back(e.what());
    }
  }
  return report;
}

}  // namespace lmcore::upgrade
