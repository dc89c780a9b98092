// The upgrade-check corpus (tests/upgrade/corpus): expected findings written beside the code as
// `# expect: CODE[,CODE]` (same line) or `# expect-next: CODE` (next line), golden output in every
// format, and --fix results compared byte for byte with tests/upgrade/corpus/expected/fixed/.
// Set LMCORE_UPDATE_GOLDEN=1 to rewrite the golden files after reviewing a change.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lmcore/base/error.h"
#include "lmcore/upgrade/report.h"
#include "lmcore/upgrade/scan.h"

namespace lmcore::upgrade {
namespace {

namespace fs = std::filesystem;
const fs::path kCorpus = LMCORE_UPGRADE_CORPUS;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out << s;
}

using Key = std::tuple<std::string, int, int, std::string>;  // path, cell, line, code

void markers_in(const std::string& path, int cell, std::string_view text, std::multiset<Key>& out) {
  int line = 1;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view l = text.substr(pos, eol - pos);
    for (const auto& [tag, delta] : {std::pair<std::string_view, int>{"# expect: ", 0}, {"# expect-next: ", 1}}) {
      const std::size_t k = l.find(tag);
      if (k == std::string_view::npos) continue;
      std::string codes(l.substr(k + tag.size()));
      std::stringstream ss(codes);
      std::string code;
      while (std::getline(ss, code, ',')) {
        while (!code.empty() && (code.back() == '\r' || code.back() == ' ')) code.pop_back();
        const std::size_t sp = code.find(' ');
        if (sp != std::string::npos) code.resize(sp);
        out.insert({path, cell, line + delta, code});
      }
    }
    pos = eol + 1;
    ++line;
  }
}

std::multiset<Key> expected_findings() {
  std::multiset<Key> out;
  for (const auto& e : fs::directory_iterator(kCorpus)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    const std::string text = read_bytes(e.path());
    if (name == "broken.ipynb") {
      out.insert({name, 0, 1, "UPG904"});
    } else if (e.path().extension() == ".ipynb") {
      const auto nb = nlohmann::json::parse(text);
      int cell = 0;
      for (const auto& c : nb["cells"]) {
        ++cell;
        if (c["cell_type"] != "code") continue;
        std::string src;
        if (c["source"].is_string()) src = c["source"];
        else for (const auto& s : c["source"]) src += s.get<std::string>();
        markers_in(name, cell, src, out);
      }
    } else {
      markers_in(name, 0, text, out);
    }
  }
  return out;
}

ScanResult scan_corpus(const fs::path& root) {
  ScanOptions opt;
  opt.base = root;
  opt.paths = {"."};
  opt.excludes = {"expected"};
  opt.threads = 2;
  return scan(opt);
}

bool update_golden() {
  const char* v = std::getenv("LMCORE_UPDATE_GOLDEN");
  return v && *v && std::string(v) != "0";
}

void expect_golden(const fs::path& golden, const std::string& actual) {
  if (update_golden()) write_bytes(golden, actual);
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing (run with LMCORE_UPDATE_GOLDEN=1 and review it)";
  const std::string want = read_bytes(golden);
  if (want == actual) return;
  // Show the first differing line.
  std::istringstream a(want), b(actual);
  std::string la, lb;
  int line = 1;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) break;
    if (!ga || !gb || la != lb) {
      ADD_FAILURE() << golden.filename() << ": first difference at line " << line << "\n  golden: " << la
                    << "\n  actual: " << lb;
      return;
    }
    ++line;
  }
  ADD_FAILURE() << golden.filename() << " differs (line endings?)";
}

TEST(UpgradeCorpus, FindingsMatchTheMarkers) {
  const ScanResult r = scan_corpus(kCorpus);
  std::multiset<Key> actual;
  for (const auto& f : r.findings) actual.insert({f.path, f.cell, f.line, f.code});
  const auto want = expected_findings();
  for (const auto& k : want)
    if (actual.count(k) < want.count(k))
      ADD_FAILURE() << "missing: " << std::get<0>(k) << " cell " << std::get<1>(k) << " line " << std::get<2>(k)
                    << " " << std::get<3>(k);
  for (const auto& k : actual)
    if (want.count(k) < actual.count(k))
      ADD_FAILURE() << "unexpected: " << std::get<0>(k) << " cell " << std::get<1>(k) << " line " << std::get<2>(k)
                    << " " << std::get<3>(k);
  EXPECT_EQ(r.python_files, 13u);
  EXPECT_EQ(r.notebooks, 2u);
  EXPECT_EQ(r.pin_files, 4u);
}

TEST(UpgradeCorpus, NothingInCommentsOrStrings) {
  ScanOptions opt;
  opt.base = kCorpus;
  opt.paths = {"strings_comments.py"};
  const ScanResult r = scan(opt);
  EXPECT_TRUE(r.findings.empty()) << format_findings(r.findings, OutputFormat::text);
}

TEST(UpgradeCorpus, GoldenOutputInEveryFormat) {
  const ScanResult r = scan_corpus(kCorpus);
  expect_golden(kCorpus / "expected" / "findings.txt", format_findings(r.findings, OutputFormat::text));
  expect_golden(kCorpus / "expected" / "findings.json", format_findings(r.findings, OutputFormat::json));
  expect_golden(kCorpus / "expected" / "findings.sarif", format_findings(r.findings, OutputFormat::sarif));
  expect_golden(kCorpus / "expected" / "findings.github", format_findings(r.findings, OutputFormat::github));
  // The JSON and SARIF goldens are well-formed and hold every finding.
  const auto j = nlohmann::json::parse(read_bytes(kCorpus / "expected" / "findings.json"));
  EXPECT_EQ(j.size(), r.findings.size());
  const auto s = nlohmann::json::parse(read_bytes(kCorpus / "expected" / "findings.sarif"));
  EXPECT_EQ(s["version"], "2.1.0");
  EXPECT_EQ(s["runs"][0]["results"].size(), r.findings.size());
}

fs::path fresh_copy(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("lmcore_upgrade_{}_{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kCorpus))
    if (e.is_regular_file()) fs::copy_file(e.path(), dir / e.path().filename());
  return dir;
}

TEST(UpgradeCorpus, DiffWritesNothingAndFixMatchesGolden) {
  const fs::path dir = fresh_copy("fix");
  const ScanResult r = scan_corpus(dir);
  // --diff: the diff, and no file touched.
  const FixReport dry = apply_fixes(r, /*write=*/false);
  EXPECT_TRUE(dry.errors.empty());
  expect_golden(kCorpus / "expected" / "fix.diff", dry.diff);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(read_bytes(e.path()), read_bytes(kCorpus / e.path().filename())) << e.path();
  // --fix: files rewritten; every byte outside the renamed identifiers kept.
  const FixReport rep = apply_fixes(r, /*write=*/true);
  EXPECT_TRUE(rep.errors.empty());
  EXPECT_EQ(rep.diff, dry.diff);
  EXPECT_EQ(rep.files_changed, 11u);
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path golden = kCorpus / "expected" / "fixed" / e.path().filename();
    const std::string after = read_bytes(e.path());
    if (update_golden() && after != read_bytes(kCorpus / e.path().filename())) write_bytes(golden, after);
    if (fs::exists(golden)) {
      EXPECT_EQ(after, read_bytes(golden)) << e.path().filename();
    } else {
      EXPECT_EQ(after, read_bytes(kCorpus / e.path().filename())) << e.path().filename() << " changed";
    }
    // No temporary files left behind.
    EXPECT_EQ(e.path().filename().string().find(".upgrade-"), std::string::npos);
  }
  // Fixing is complete and idempotent: nothing fixable is left.
  const ScanResult again = scan_corpus(dir);
  for (const auto& f : again.findings) {
    EXPECT_FALSE(f.fix) << f.path << ":" << f.line << " " << f.code;
    if (f.code.rfind("UPG10", 0) == 0) {
      EXPECT_TRUE(f.path == "noqa.py" || f.path == "syntax_error.py")
          << "unfixed rename " << f.path << ":" << f.line << " " << f.message;
    }
  }
  fs::remove_all(dir);
}

TEST(UpgradeCorpus, FixRefusesAFileChangedSinceTheScan) {
  const fs::path dir = fresh_copy("changed");
  const ScanResult r = scan_corpus(dir);
  write_bytes(dir / "aliases.py", read_bytes(dir / "aliases.py") + "# edited\n");
  const FixReport rep = apply_fixes(r, /*write=*/true);
  ASSERT_EQ(rep.errors.size(), 1u);
  EXPECT_NE(rep.errors[0].find("aliases.py: changed since it was checked"), std::string::npos);
  fs::remove_all(dir);
}

TEST(UpgradeScan, DefaultExcludesAndGlobs) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("lmcore_upgrade_walk_{}", ::getpid());
  fs::remove_all(dir);
  const std::string use = "import torch.distributed as dist\ndist.all_gather_into_tensor(1, 2)\n";
  for (const char* p : {"pkg/a.py", "build/b.py", ".venv/lib/c.py", "env2/d.py", "node_modules/e.py",
                        "pkg/__pycache__/f.py", "gen/g.py", "pkg/skip_me.py"})
    write_bytes(dir / p, use);
  write_bytes(dir / "env2" / "pyvenv.cfg", "home = /usr/bin\n");
  ScanOptions opt;
  opt.base = dir;
  opt.paths = {"."};
  opt.excludes = {"gen", "skip_*.py"};
  auto paths = [](const ScanResult& r) {
    std::set<std::string> s;
    for (const auto& f : r.findings) s.insert(f.path);
    return s;
  };
  EXPECT_EQ(paths(scan(opt)), (std::set<std::string>{"pkg/a.py"}));
  opt.default_excludes = false;
  opt.excludes.clear();
  EXPECT_EQ(paths(scan(opt)).size(), 8u);
  // A file named explicitly is checked even inside an excluded folder.
  opt.default_excludes = true;
  opt.paths = {"build/b.py"};
  EXPECT_EQ(paths(scan(opt)), (std::set<std::string>{"build/b.py"}));
  // A missing path is a usage error.
  opt.paths = {"nope"};
  EXPECT_THROW(scan(opt), Error);
  fs::remove_all(dir);
}

TEST(UpgradeScan, UnreadableFileIsReportedAndTheScanGoesOn) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("lmcore_upgrade_unreadable_{}", ::getpid());
  fs::remove_all(dir);
  write_bytes(dir / "ok.py", "import torch.distributed as dist\ndist.reduce_scatter_tensor(1, 2)\n");
  // A FIFO cannot be read without a writer (and, unlike chmod 000, this holds for root too).
  ASSERT_EQ(::mkfifo((dir / "pipe.py").c_str(), 0600), 0);
  ScanOptions opt;
  opt.base = dir;
  opt.paths = {"pipe.py", "ok.py"};
  const ScanResult r = scan(opt);
  ASSERT_EQ(r.findings.size(), 2u) << format_findings(r.findings, OutputFormat::text);
  EXPECT_EQ(r.findings[0].path, "ok.py");
  EXPECT_EQ(r.findings[0].code, "UPG102");
  EXPECT_EQ(r.findings[1].path, "pipe.py");
  EXPECT_EQ(r.findings[1].code, "UPG901");
  fs::remove_all(dir);
}

TEST(UpgradeScan, ModuleNamesResolveRelativeImports) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("lmcore_upgrade_pkg_{}", ::getpid());
  fs::remove_all(dir);
  // Inside a package named torch.distributed, relative imports reach torch's own functions.
  write_bytes(dir / "torch" / "__init__.py", "");
  write_bytes(dir / "torch" / "distributed" / "__init__.py",
              "from .distributed_c10d import *\nfrom .distributed_c10d import all_gather_into_tensor\n");
  write_bytes(dir / "torch" / "distributed" / "helper.py",
              "from .distributed_c10d import reduce_scatter_tensor\nfrom . import distributed_c10d as c10d\n"
              "from .. import distributed\nc10d.all_gather_into_tensor(1, 2)\ndistributed.reduce_scatter_tensor(3, 4)\n");
  // Outside torch, a package's own names are its own, and re-exports are not followed across files.
  write_bytes(dir / "mypkg" / "__init__.py", "from .comm import gather\n");
  write_bytes(dir / "mypkg" / "comm.py", "from torch.distributed import all_gather_into_tensor as gather\n");
  write_bytes(dir / "mypkg" / "use.py", "from . import comm\ncomm.gather(1, 2)\n");
  ScanOptions opt;
  opt.base = dir;
  opt.paths = {"."};
  const ScanResult r = scan(opt);
  std::vector<std::string> got;
  for (const auto& f : r.findings) got.push_back(fmt::format("{}:{} {}", f.path, f.line, f.code));
  EXPECT_EQ(got, (std::vector<std::string>{"mypkg/comm.py:1 UPG101", "torch/distributed/__init__.py:2 UPG101",
                                           "torch/distributed/helper.py:1 UPG102", "torch/distributed/helper.py:4 UPG101",
                                           "torch/distributed/helper.py:5 UPG102"}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmcore::upgrade
