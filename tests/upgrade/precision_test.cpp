// The precision corpus (tests/upgrade/precision): code from libraries that are not PyTorch (NumPy
// structured dtypes, ast nodes, SymPy matrices, tkinter and turtle), a file that uses torch beside
// them, and a package whose modules get tensors from one that imports torch. Every code line says
// what upgrade-check must report on it:
//   `# expect: CODE[,CODE]`  reported by default (and with --min-confidence low),
//   `# low: CODE`            reported only with --min-confidence low (no evidence of a tensor),
//   `# none`                 never reported.
// A code line without one of these markers fails the test, so the corpus cannot drift unlabelled.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "lmcore/upgrade/report.h"
#include "lmcore/upgrade/scan.h"

namespace lmcore::upgrade {
namespace {

namespace fs = std::filesystem;
const fs::path kPrecision = LMCORE_UPGRADE_PRECISION;

using LineKey = std::tuple<std::string, int, std::string>;  // path, line, code

struct Marked {
  std::multiset<LineKey> by_default, low_only;
  std::vector<std::string> unmarked;
};

void add_codes(const std::string& path, int line, std::string_view codes, std::multiset<LineKey>& out) {
  std::stringstream ss{std::string(codes)};
  std::string code;
  while (std::getline(ss, code, ',')) {
    while (!code.empty() && code.front() == ' ') code.erase(0, 1);
    while (!code.empty() && (code.back() == ' ' || code.back() == '\r')) code.pop_back();
    if (!code.empty()) out.insert({path, line, code});
  }
}

Marked read_markers() {
  Marked m;
  for (const auto& e : fs::recursive_directory_iterator(kPrecision)) {
    if (!e.is_regular_file() || e.path().extension() != ".py") continue;
    const std::string path = e.path().lexically_relative(kPrecision).generic_string();
    std::ifstream in(e.path());
    std::string l;
    int line = 0;
    while (std::getline(in, l)) {
      ++line;
      const std::size_t first = l.find_first_not_of(" \t");
      if (first == std::string::npos || l[first] == '#') continue;  // blank or comment-only
      if (const auto k = l.find("# expect: "); k != std::string::npos) {
        add_codes(path, line, std::string_view(l).substr(k + 10), m.by_default);
      } else if (const auto k2 = l.find("# low: "); k2 != std::string::npos) {
        add_codes(path, line, std::string_view(l).substr(k2 + 7), m.low_only);
      } else if (l.find("# none") == std::string::npos) {
        m.unmarked.push_back(path + ":" + std::to_string(line));
      }
    }
  }
  return m;
}

std::multiset<LineKey> scan_keys(Confidence min_confidence) {
  ScanOptions opt;
  opt.base = kPrecision;
  opt.paths = {"."};
  opt.threads = 2;
  opt.min_confidence = min_confidence;
  std::multiset<LineKey> out;
  for (const auto& f : scan(opt).findings) out.insert({f.path, f.line, f.code});
  return out;
}

void expect_same(const std::multiset<LineKey>& want, const std::multiset<LineKey>& got, const char* run) {
  for (const auto& k : want)
    if (got.count(k) < want.count(k))
      ADD_FAILURE() << run << ": missing " << std::get<0>(k) << ":" << std::get<1>(k) << " " << std::get<2>(k);
  for (const auto& k : got)
    if (want.count(k) < got.count(k))
      ADD_FAILURE() << run << ": unexpected " << std::get<0>(k) << ":" << std::get<1>(k) << " " << std::get<2>(k);
}

TEST(UpgradePrecision, EveryLineIsMarked) {
  const Marked m = read_markers();
  for (const auto& where : m.unmarked) ADD_FAILURE() << where << ": no '# expect:', '# low:' or '# none' marker";
  EXPECT_EQ(m.by_default.size(), 7u);
  EXPECT_EQ(m.low_only.size(), 12u);
}

TEST(UpgradePrecision, DefaultRunReportsOnlyWhereThereIsEvidenceOfATensor) {
  expect_same(read_markers().by_default, scan_keys(Confidence::medium), "default");
}

TEST(UpgradePrecision, MinConfidenceLowKeepsTheWideNet) {
  const Marked m = read_markers();
  std::multiset<LineKey> want = m.by_default;
  want.insert(m.low_only.begin(), m.low_only.end());
  expect_same(want, scan_keys(Confidence::low), "--min-confidence low");
}

TEST(UpgradePrecision, LowFindingsSayWhyTheyAreLow) {
  ScanOptions opt;
  opt.base = kPrecision;
  opt.paths = {"numpy_structured.py", "pkg/plain.py"};
  opt.min_confidence = Confidence::low;
  const ScanResult r = scan(opt);
  ASSERT_FALSE(r.findings.empty());
  for (const auto& f : r.findings) {
    EXPECT_EQ(f.confidence, Confidence::low) << format_findings({f}, OutputFormat::text);
    EXPECT_NE(f.message.find("(confidence: low; the receiver"), std::string::npos) << f.message;
  }
}

}  // namespace
}  // namespace lmcore::upgrade
