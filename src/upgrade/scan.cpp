// The upgrade-check driver: file discovery, parallel per-file checks, filters. See scan.h.
#include "lmcore/upgrade/scan.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "lmcore/base/error.h"
#include "lmcore/base/parallel.h"
#include "lmcore/upgrade/cuda_check.h"
#include "lmcore/upgrade/notebook.h"
#include "lmcore/upgrade/python_check.h"

namespace lmcore::upgrade {

namespace fs = std::filesystem;

const std::vector<std::string>& default_excluded_dirs() {
  static const std::vector<std::string> dirs = {
      ".bzr",         ".direnv",   ".eggs",        ".git",       ".hg",          ".ipynb_checkpoints",
      ".mypy_cache",  ".nox",      ".pytest_cache", ".pytype",   ".ruff_cache",  ".svn",
      ".tox",         ".venv",     "venv",          "__pycache__", "__pypackages__", "_build",
      "build",        "dist",      "buck-out",      "node_modules", "site-packages", ".cache"};
  return dirs;
}

bool path_excluded(const std::string& name, const std::string& relative, const std::vector<std::string>& globs) {
  for (const auto& g : globs) {
    if (fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
    if (!relative.empty() && fnmatch(g.c_str(), relative.c_str(), 0) == 0) return true;
  }
  return false;
}

std::uint64_t content_hash(std::string_view bytes) {
  // FNV-1a over 8-byte words (then the tail bytes): only has to notice a file changing under us.
  std::uint64_t h = 1469598103934665603ull;
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * 1099511628211ull;
  return h ^ bytes.size();
}

namespace {

enum class Kind { python, notebook, pin };

struct Job {
  fs::path path;
  std::string display;
  std::string module;
  bool package_init = false;
  Kind kind;
  std::optional<PinFileKind> pin;
  std::uintmax_t size = 0;
};

std::string display_path(const fs::path& p) {
  std::string s = p.lexically_normal().generic_string();
  while (s.rfind("./", 0) == 0) s.erase(0, 2);
  return s.empty() ? "." : s;
}

std::optional<Kind> kind_of(const fs::path& p, std::optional<PinFileKind>& pin) {
  const std::string ext = p.extension().string();
  if (ext == ".py" || ext == ".pyw") return Kind::python;
  if (ext == ".ipynb") return Kind::notebook;
  pin = pin_file_kind(p);
  if (pin) return Kind::pin;
  return std::nullopt;
}

// The dotted package a folder is (from the chain of parent folders that hold an __init__.py), ""
// when it is not a package; remembered per folder, since every file of a package asks about the
// same chain and each question is a path lookup in the kernel.
struct PackageCache {
  std::unordered_map<std::string, std::optional<std::string>> package;  // absolute folder -> package
  const std::optional<std::string>& of(const fs::path& dir) {
    auto [it, inserted] = package.try_emplace(dir.native());
    if (!inserted) return it->second;
    std::error_code ec;
    std::optional<std::string> result;
    if (fs::exists(dir / "__init__.py", ec)) {
      const fs::path parent = dir.parent_path();
      const std::optional<std::string>* outer = nullptr;
      if (!parent.empty() && parent != dir) outer = &of(parent);
      const std::string name = dir.filename().string();
      result = outer && *outer ? fmt::format("{}.{}", **outer, name) : name;
    }
    // of(parent) may have rehashed the map: look the entry up again.
    return package[dir.native()] = std::move(result);
  }
};

// Dotted module name from the chain of parent folders that hold an __init__.py.
std::string module_name(const fs::path& file, bool& package_init, PackageCache& cache) {
  std::error_code ec;
  const fs::path abs = file.is_absolute() ? file : fs::absolute(file, ec);
  package_init = abs.filename() == "__init__.py";
  const std::optional<std::string>& pkg = cache.of(abs.parent_path());
  if (package_init) return pkg ? *pkg : "";
  const std::string stem = abs.stem().string();
  return pkg ? fmt::format("{}.{}", *pkg, stem) : stem;
}

// Reads the whole file into `buf` (grown, never shrunk, so a worker reuses one buffer) and returns
// the bytes read through `out`.
bool read_file(const fs::path& p, std::string& buf, std::string_view& out, std::string& error) {
  // O_NONBLOCK: opening a FIFO or device named on the command line must not hang the scan.
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = std::strerror(errno);
    ::close(fd);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    error = S_ISFIFO(st.st_mode) ? "not a regular file (a FIFO)" : "not a regular file";
    ::close(fd);
    return false;
  }
  if (buf.size() < static_cast<std::size_t>(st.st_size) + 1) buf.resize(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  while (true) {
    if (got == buf.size()) buf.resize(buf.size() + 65536);  // the file grew since fstat
    const ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out = std::string_view(buf.data(), got);
  ::close(fd);
  return true;
}

Finding file_finding(const std::string& display, const char* code, std::string message) {
  Finding f;
  f.path = display;
  f.line = f.col = f.end_line = 1;
  f.end_col = 1;
  f.code = code;
  f.message = std::move(message);
  return f;
}

// What one file gave: its findings, and for the Python rules what settles their confidence.
struct FileResult {
  std::vector<Finding> findings;
  std::vector<std::uint8_t> needs_torch;  // aligned with findings (see PythonCheck)
  std::vector<std::string> value_sources;
  std::vector<std::string> imports;
  bool imports_torch = false;
  // Ruled out by may_have_python_findings without tokenizing: whether it imports torch is known
  // only when its bytes never say "torch" (then it does not), otherwise found out if needed.
  bool prefiltered = false;
  bool mentions_torch = false;
};

void take_python(PythonCheck&& c, FileResult& r) {
  r.findings = std::move(c.findings);
  r.needs_torch = std::move(c.needs_torch);
  r.value_sources = std::move(c.value_sources);
  r.imports = std::move(c.imports);
  r.imports_torch = c.imports_torch;
}

void check_file(const Job& job, bool prefilter, FileResult& result, ScannedFile& scanned) {
  std::vector<Finding>& out = result.findings;
  thread_local std::string buffer;
  std::string_view text;
  std::string error;
  scanned.display = job.display;
  scanned.path = job.path;
  scanned.notebook = job.kind == Kind::notebook;
  if (!read_file(job.path, buffer, text, error)) {
    out.push_back(file_finding(job.display, "UPG901", fmt::format("cannot read file: {}", error)));
    return;
  }
  // The hash guards --fix against a file changed since the check: only files with a fix need it.
  auto hash_if_fixable = [&] {
    for (const auto& f : out)
      if (f.fix) {
        scanned.content_hash = content_hash(text);
        return;
      }
  };
  std::vector<Finding> found;
  if (job.kind == Kind::python) {
    if (prefilter && !may_have_python_findings(text)) {
      result.prefiltered = true;
      result.mentions_torch = text.find("torch") != std::string_view::npos;
      return;
    }
    PythonContext ctx{job.module, job.package_init};
    take_python(check_python({text}, false, ctx), result);
    for (auto& f : out) f.path = job.display;
    hash_if_fixable();
    return;
  } else if (job.kind == Kind::notebook) {
    Notebook nb;
    try {
      nb = read_notebook(text);
    } catch (const Error& e) {
      out.push_back(file_finding(job.display, "UPG904", fmt::format("not a notebook: {}", e.what())));
      return;
    }
    PythonContext ctx{"", false};
    const std::vector<std::string_view> cells(nb.code.begin(), nb.code.end());
    take_python(check_python(cells, true, ctx), result);
    found = std::move(out);
    out.clear();
    for (auto& f : found) {
      const auto index = static_cast<std::size_t>(f.cell - 1);
      f.cell = nb.cell_number[index];
      // Edits are into the cell's text; move them onto the .ipynb bytes (or drop them).
      if (f.fix && !notebook_raw_range(nb, index, f.fix->begin, f.fix->end)) f.fix.reset();
    }
    for (const auto& sl : nb.shell_lines) {
      auto pins = check_pin_line(sl.text, sl.line, sl.col + 1, PinFileKind::shell);
      for (auto& f : pins) f.cell = sl.cell;
      found.insert(found.end(), pins.begin(), pins.end());
    }
  } else {
    found = check_pin_text(text, *job.pin);
  }
  for (auto& f : found) f.path = job.display;
  out.insert(out.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
  result.needs_torch.resize(out.size(), 0);  // pin findings stand on their own
  hash_if_fixable();
}

// Whether a file ruled out by the prefilter imports torch: it is tokenized after all (rarely needed:
// only when a file with an unsettled finding imports it and its bytes say "torch").
bool prefiltered_imports_torch(const Job& job) {
  std::string buffer, error;
  std::string_view text;
  if (!read_file(job.path, buffer, text, error)) return false;
  return check_python({text}, false, PythonContext{job.module, job.package_init}).imports_torch;
}

}  // namespace

bool finding_selected(const Finding& f, const ScanOptions& o) {
  auto has_prefix = [&](const std::vector<std::string>& list) {
    for (const auto& p : list)
      if (f.code.rfind(p, 0) == 0) return true;
    return false;
  };
  if (f.confidence < o.min_confidence) return false;
  if (f.code.rfind("UPG9", 0) == 0) return !has_prefix(o.ignore);  // scan errors are always shown unless ignored
  if (!o.select.empty() && !has_prefix(o.select)) return false;
  return !has_prefix(o.ignore);
}

ScanResult scan(const ScanOptions& options) {
  const fs::path base = options.base.empty() ? fs::current_path() : options.base;
  std::vector<std::string> dir_globs = options.excludes;
  if (options.default_excludes) dir_globs.insert(dir_globs.end(), default_excluded_dirs().begin(),
                                                 default_excluded_dirs().end());
  std::vector<Job> jobs;
  std::vector<Finding> walk_errors;
  PackageCache packages;
  // `named`: given on the command line. Such a file is checked whatever its name (a script without
  // .py, say) as Python when it is not a notebook or a pin file: skipping it silently would report a
  // clean file that was never read.
  auto add_job = [&](const fs::path& path, const std::string& display, bool named) {
    std::optional<PinFileKind> pin;
    auto kind = kind_of(path, pin);
    if (!kind && named) kind = Kind::python;
    if (!kind) return;
    Job j;
    j.path = path;
    j.display = display;
    j.kind = *kind;
    j.pin = pin;
    std::error_code ec;
    j.size = fs::file_size(path, ec);
    if (j.kind == Kind::python) j.module = module_name(path, j.package_init, packages);
    jobs.push_back(std::move(j));
  };
  for (const auto& given : options.paths) {
    const fs::path p = fs::path(given).is_absolute() ? fs::path(given) : base / given;
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (ec || !fs::exists(st)) fail("upgrade-check: path '{}' does not exist", given);
    if (!fs::is_directory(st)) {
      add_job(p, display_path(given), true);  // a file named on the command line is checked even if excluded
      continue;
    }
    fs::recursive_directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end;
    // Display paths are the given folder's plus the path below it, built as strings: the
    // iterator's paths all start with p's own text.
    std::string dir_display = display_path(given);
    while (dir_display.size() > 1 && dir_display.back() == '/') dir_display.pop_back();
    const std::size_t root_len = p.native().size() + (p.native().empty() || p.native().back() == '/' ? 0 : 1);
    if (ec) {
      walk_errors.push_back(file_finding(display_path(given), "UPG901", fmt::format("cannot list folder: {}", ec.message())));
      continue;
    }
    for (; it != end; it.increment(ec)) {
      if (ec) {
        walk_errors.push_back(file_finding(display_path(given), "UPG901", fmt::format("cannot list folder: {}", ec.message())));
        ec.clear();
        break;
      }
      const fs::path& e = it->path();
      const std::string name = e.filename().string();
      const std::string rel = e.native().substr(std::min(root_len, e.native().size()));
      std::error_code sec;
      const bool is_dir = it->is_directory(sec);
      if (is_dir) {
        if (it->is_symlink(sec) || path_excluded(name, rel, dir_globs) ||
            (options.default_excludes && (fs::exists(e / "pyvenv.cfg", sec) ||
                                          (name.size() > 9 && name.substr(name.size() - 9) == ".egg-info"))))
          it.disable_recursion_pending();
        continue;
      }
      if (path_excluded(name, rel, options.excludes)) continue;
      if (!it->is_regular_file(sec)) continue;
      add_job(e, dir_display == "." ? rel : dir_display == "/" ? "/" + rel : dir_display + "/" + rel, false);
    }
  }

  // Largest files first, handed out one at a time: the per-file cost varies 1000x across a tree.
  std::vector<std::size_t> order(jobs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return jobs[a].size > jobs[b].size; });
  std::vector<FileResult> per_file(jobs.size());
  std::vector<ScannedFile> scanned(jobs.size());
  const int threads = std::max(1, std::min<int>(options.threads > 0 ? options.threads : num_threads(),
                                                static_cast<int>(std::max<std::size_t>(1, jobs.size()))));
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    while (true) {
      const std::size_t k = next.fetch_add(1);
      if (k >= order.size()) return;
      const std::size_t j = order[k];
      try {
        check_file(jobs[j], options.prefilter, per_file[j], scanned[j]);
      } catch (const std::exception& e) {
        // A bug or resource failure on one file: report it on that file and keep going.
        per_file[j].findings.push_back(
            file_finding(jobs[j].display, "UPG901", fmt::format("internal error: {}", e.what())));
        per_file[j].needs_torch.resize(per_file[j].findings.size(), 0);
      }
    }
  };
  // The calling thread is one of the workers: most files are ruled out in microseconds, so a
  // thread started for nothing costs more than it brings.
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();

  // Torch evidence (python_check.h): a file imports torch, or imports a module of this tree that does;
  // a value from a call into a module of the tree: that module imports torch.
  // Modules ruled out by the prefilter whose bytes say "torch" are looked at only when asked about.
  std::unordered_map<std::string_view, bool> module_imports_torch;
  std::unordered_map<std::string_view, std::vector<std::size_t>> module_unknown;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    if (job.kind != Kind::python || job.module.empty()) continue;
    const FileResult& pf = per_file[j];
    const bool in_torch = job.module == "torch" || job.module.rfind("torch.", 0) == 0;
    bool& known = module_imports_torch[job.module];
    if (!pf.prefiltered) known |= pf.imports_torch;
    else if (in_torch) known = true;
    else if (pf.mentions_torch) module_unknown[job.module].push_back(j);
  }
  auto imports_torch = [&](std::string_view m) -> std::optional<bool> {
    auto it = module_imports_torch.find(m);
    if (it == module_imports_torch.end()) return std::nullopt;
    if (!it->second) {
      auto u = module_unknown.find(m);
      if (u != module_unknown.end()) {
        for (const std::size_t j : u->second) it->second = it->second || prefiltered_imports_torch(jobs[j]);
        module_unknown.erase(u);
      }
    }
    return it->second;
  };
  for (auto& pf : per_file) {
    if (std::find(pf.needs_torch.begin(), pf.needs_torch.end(), 1) == pf.needs_torch.end()) continue;
    bool evidence = pf.imports_torch;
    for (const auto& m : pf.imports) {
      if (evidence) break;
      evidence = imports_torch(m).value_or(false);
    }
    PythonCheck c;
    c.findings = std::move(pf.findings);
    c.needs_torch = std::move(pf.needs_torch);
    c.value_sources = std::move(pf.value_sources);
    settle_torch_evidence(c, evidence, imports_torch);
    pf.findings = std::move(c.findings);
  }

  ScanResult r;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    switch (jobs[j].kind) {
      case Kind::python: ++r.python_files; break;
      case Kind::notebook: ++r.notebooks; break;
      case Kind::pin: ++r.pin_files; break;
    }
    for (auto& f : per_file[j].findings) {
      if (!finding_selected(f, options)) continue;
      r.findings.push_back(std::move(f));
    }
  }
  for (auto& f : walk_errors) r.findings.push_back(std::move(f));
  std::sort(r.findings.begin(), r.findings.end(), finding_less);
  r.files = std::move(scanned);
  std::sort(r.files.begin(), r.files.end(), [](const ScannedFile& a, const ScannedFile& b) { return a.display < b.display; });
  return r;
}

}  // namespace lmcore::upgrade
