// Targeted tests of the Python rules, the CUDA checks, the edits/diff and the output formats.
#include <gtest/gtest.h>

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lmcore/base/error.h"
#include "lmcore/upgrade/cuda_check.h"
#include "lmcore/upgrade/notebook.h"
#include "lmcore/upgrade/python_check.h"
#include "lmcore/upgrade/report.h"
#include "lmcore/upgrade/scan.h"
#include "tests/base/base_test_util.h"

namespace lmcore::upgrade {
namespace {

namespace fs = std::filesystem;

// "line:col CODE" for each finding.
std::vector<std::string> brief(const std::vector<Finding>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs) out.push_back(fmt::format("{}:{} {}", f.line, f.col, f.code));
  return out;
}

std::vector<std::string> check(std::string_view src, std::string module = "") {
  return brief(check_python_source(src, PythonContext{std::move(module), false}));
}

TEST(UpgradeRules, RenamesNeedTheNameToResolveToTorch) {
  EXPECT_EQ(check("import mylib as dist\ndist.all_gather_into_tensor(a, b)\n"), std::vector<std::string>{});
  EXPECT_EQ(check("all_gather_into_tensor(a, b)\n"), std::vector<std::string>{});
  EXPECT_EQ(check("import torch\ntorch.distributed.all_gather_into_tensor(a, b)\n"),
            (std::vector<std::string>{"2:19 UPG101"}));
  EXPECT_EQ(check("import torch.distributed as d, os\nx = [d.reduce_scatter_tensor]\n"),
            (std::vector<std::string>{"2:8 UPG102"}));
  // A keyword argument named like the function, and the definition of a method, are not uses.
  EXPECT_EQ(check("import torch.distributed as dist\nf(all_gather_into_tensor=1)\n"
                  "class A:\n    def reduce_scatter_tensor(self): pass\n"),
            std::vector<std::string>{});
}

TEST(UpgradeRules, TheDefiningModuleRenamesItsDefinitionAndCalls) {
  const std::string src =
      "def all_gather_into_tensor(out, inp):\n    pass\n\n"
      "def _all_gather_base(out, inp):\n    return all_gather_into_tensor(out, inp)\n";
  EXPECT_EQ(check(src, "torch.distributed.distributed_c10d"), (std::vector<std::string>{"1:5 UPG101", "5:12 UPG101"}));
  EXPECT_EQ(check(src, "mypkg.util"), std::vector<std::string>{});
}

TEST(UpgradeRules, EditsTouchOnlyTheIdentifier) {
  const std::string src = "from torch.distributed import (\n    all_gather_into_tensor as ag,  # x\n)\nag(1, 2)\n";
  const auto found = check_python_source(src, {});
  std::vector<Edit> edits;
  for (const auto& f : found)
    if (f.fix) edits.push_back(*f.fix);
  ASSERT_EQ(edits.size(), 1u);
  EXPECT_EQ(apply_edits(src, edits),
            "from torch.distributed import (\n    all_gather_single as ag,  # x\n)\nag(1, 2)\n");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_FALSE(found[1].fix);  // the alias use is fixed at the import
  EXPECT_NE(found[1].message.find("imported on line 2"), std::string::npos);
}

TEST(UpgradeRules, NamedTensorConfidence) {
  auto conf = [](std::string_view src) {
    std::vector<std::string> out;
    for (const auto& f : check_python_source(src, {}))
      out.push_back(fmt::format("{} {}", f.code, confidence_name(f.confidence)));
    return out;
  };
  // Receiver known to be a tensor: high. Unknown receiver: the rule's confidence when the file
  // imports torch, low (below the default --min-confidence) when it does not.
  EXPECT_EQ(conf("import torch\nx = torch.ones(2)\nx.names\ny.names\n"),
            (std::vector<std::string>{"UPG201 high", "UPG201 medium"}));
  EXPECT_EQ(conf("x = f()\nx.names\n"), (std::vector<std::string>{"UPG201 low"}));
  EXPECT_EQ(conf("def f(t: 'x'): t.align_to('N')\n"), (std::vector<std::string>{"UPG204 low"}));
  EXPECT_EQ(conf("import torch\ndef f(t): t.align_to('N')\n"), (std::vector<std::string>{"UPG204 medium"}));
  EXPECT_EQ(conf("from torch import nn\ndef f(t): t.align_to('N')\n"), (std::vector<std::string>{"UPG204 medium"}));
  EXPECT_EQ(conf("import torchvision\ndef f(t): t.align_to('N')\n"), (std::vector<std::string>{"UPG204 low"}));
  EXPECT_EQ(conf("import torch\ntorch.ones(2).refine_names('N')\n"), (std::vector<std::string>{"UPG202 high"}));
  EXPECT_EQ(conf("def f(t):\n    t.refine_names('N')\n    t.has_names()\n"),
            (std::vector<std::string>{"UPG202 low", "UPG206 low"}));
  EXPECT_EQ(conf("import xarray as xr\nxr.concat(ds, dim='time')\nds.mean(dim='time')\n"),
            (std::vector<std::string>{"UPG210 low"}));
  EXPECT_EQ(conf("import torch\nimport xarray as xr\nxr.concat(ds, dim='time')\nds.mean(dim='time')\n"),
            (std::vector<std::string>{"UPG210 medium"}));
  EXPECT_EQ(conf("import torch\np.rename('new')\np.rename(None)\np.rename(N='batch')\n"),
            (std::vector<std::string>{"UPG203 high", "UPG203 medium"}));
  EXPECT_EQ(conf("p.rename('new')\np.rename(None)\np.rename(N='batch')\n"),
            (std::vector<std::string>{"UPG203 low", "UPG203 low"}));
  EXPECT_EQ(conf("import torch\nx.sum('C')\nx.softmax('C')\nx.sum(0)\n"),
            (std::vector<std::string>{"UPG210 medium", "UPG210 medium"}));
  // A module of the torch package needs no import of torch.
  EXPECT_EQ(brief(check_python_source("def f(t):\n    return t.names\n", {"torch.nn.utils", false})),
            (std::vector<std::string>{"2:14 UPG201"}));
  // The message states the confidence that was settled.
  const auto low = check_python_source("def f(t):\n    return t.names\n", {});
  ASSERT_EQ(low.size(), 1u);
  EXPECT_NE(low[0].message.find("(confidence: low; the receiver is not known to be a tensor, and neither this file"),
            std::string::npos)
      << low[0].message;
}

// UPG210 binds arguments to the signatures of dim_params.h: only a string that lands on a
// dimension parameter, and that PyTorch would take as a name, is a finding.
TEST(UpgradeRules, DimensionNamesFollowPyTorchSignatures) {
  const std::string head = "import torch\nimport torch.nn.functional as F\nt = torch.ones(2)\n";
  auto at = [&](std::string_view line) { return check(head + std::string(line) + "\n"); };
  using V = std::vector<std::string>;
  // Tensor.norm's named overloads were never usable: 'fro' and 'nuc' are its `p`.
  EXPECT_EQ(at("t.norm('fro')"), V{});
  EXPECT_EQ(at("t.norm(p='nuc')"), V{});
  EXPECT_EQ(at("t.norm(2, 'C')"), V{});
  // flatten: every named overload needs out_dim.
  EXPECT_EQ(at("t.flatten(0, 1)"), V{});
  EXPECT_EQ(at("t.flatten('F')"), V{});
  EXPECT_EQ(at("t.flatten(0, 1, 'F')"), V{"4:17 UPG210"});
  EXPECT_EQ(at("t.flatten(['N', 'C'], 'F')"), V{"4:11 UPG210"});
  EXPECT_EQ(at("t.flatten(start_dim='A', end_dim='B', out_dim='F')"), V{"4:21 UPG210"});
  // A dimension name is an identifier; bytes and f-strings are not names.
  EXPECT_EQ(at("t.unbind('<KeyPress>')"), V{});
  EXPECT_EQ(at("t.unbind('1C')"), V{});
  EXPECT_EQ(at("t.unbind(b'C')"), V{});
  EXPECT_EQ(at("t.unbind(f'C')"), V{});
  EXPECT_EQ(at("t.unbind('_C1')"), V{"4:10 UPG210"});
  EXPECT_EQ(at("t.unbind(r'C')"), V{"4:10 UPG210"});
  // Positions: kthvalue(k, dim), and a required parameter left out means no named overload.
  EXPECT_EQ(at("t.kthvalue(2, 'C')"), V{"4:15 UPG210"});
  EXPECT_EQ(at("t.kthvalue('C')"), V{});
  EXPECT_EQ(at("t.select('C')"), V{});
  EXPECT_EQ(at("t.select('C', 0)"), V{"4:10 UPG210"});
  // Sequence[Dimname] takes a tuple of names; Dimname does not.
  EXPECT_EQ(at("t.sum(('C', 'H'))"), V{"4:7 UPG210"});
  EXPECT_EQ(at("t.softmax(('C',))"), V{});
  // Ops with no named overload.
  EXPECT_EQ(at("t.unsqueeze('C')"), V{});
  EXPECT_EQ(at("t.narrow('C', 0, 1)"), V{});
  EXPECT_EQ(at("t.argmax('C')"), V{});
  EXPECT_EQ(at("t.size('C')"), V{"4:8 UPG210"});
  // Keywords: unknown ones, keyword-only ones, one given twice.
  EXPECT_EQ(at("t.sum(dim='C', bogus=1)"), V{});
  EXPECT_EQ(at("t.sum('C', dim='H')"), V{});
  EXPECT_EQ(at("t.diagonal('A')"), V{});
  EXPECT_EQ(at("t.diagonal(outdim='D', dim1='A', dim2='B')"), V{"4:19 UPG210"});
  EXPECT_EQ(at("t.sort(dim='C', descending=True)"), V{"4:12 UPG210"});
  EXPECT_EQ(at("t.sum(*dims)"), V{});
  EXPECT_EQ(at("t.transpose(*names, 'C')"), V{});
  EXPECT_EQ(at("t.sum('C', **kw)"), V{"4:7 UPG210"});
  // Function forms: the tensor comes first (or as input=), then the method's parameters.
  EXPECT_EQ(at("torch.sum(t, 'C')"), V{"4:14 UPG210"});
  EXPECT_EQ(at("torch.sum('C')"), V{});
  EXPECT_EQ(at("torch.sum(input=t, dim='C')"), V{"4:24 UPG210"});
  EXPECT_EQ(at("torch.cat([t, t], 'C')"), V{"4:19 UPG210"});
  EXPECT_EQ(at("torch.cumsum(t, 'C', out=t)"), V{"4:17 UPG210"});
  EXPECT_EQ(at("torch.Tensor.sum(t, 'C')"), V{"4:21 UPG210"});
  EXPECT_EQ(at("torch.size(t, 'C')"), V{});  // Tensor.size has no torch.size
  EXPECT_EQ(at("F.softmax(t, dim='C')"), V{"4:18 UPG210"});
  EXPECT_EQ(at("F.softmax(t, 'C')"), V{});  // positions of torch.nn.functional are not in the table
  // One finding per call, at the first dimension name.
  EXPECT_EQ(at("t.transpose('H', 'W')"), V{"4:13 UPG210"});
  // Calls into other libraries and onto modules are not tensor methods.
  EXPECT_EQ(at("import numpy as np\nnp.sum(t, 'C')"), V{});
}

TEST(UpgradeRules, AVariableHoldingARenamedFunctionIsFoundAtItsAssignment) {
  EXPECT_EQ(check("import torch.distributed as dist\nfn = dist.all_gather_into_tensor\n"
                  "def f():\n    return fn\nfn(a, b)\n"),
            (std::vector<std::string>{"2:11 UPG101"}));
  // An imported alias is fixed at the import and still reported where used.
  EXPECT_EQ(check("from torch.distributed import all_gather_into_tensor as ag\nag(1, 2)\n"),
            (std::vector<std::string>{"1:31 UPG101", "2:1 UPG101"}));
}

TEST(UpgradeRules, NotebookCellsShareImports) {
  const auto found = check_python_cells({"import torch.distributed as dist\n", "\n\ndist.reduce_scatter_tensor(a, b)\n"}, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].cell, 2);
  EXPECT_EQ(found[0].line, 3);
  EXPECT_EQ(found[0].col, 6);
}

// Any JSON the parser refuses is "not valid JSON" (UPG904 in a scan), a number past double's range
// (the parser's out_of_range, not a parse_error) too: it was reported as an internal error (UPG901).
TEST(UpgradeNotebook, JsonTheParserRefusesIsNotANotebook) {
  for (const char* text : {R"({"cells": [})", R"({"cells": [], "metadata": {"x": 1e400}, "nbformat": 4})"}) {
    const std::string e = base::testing::error_of([&] { (void)read_notebook(text); });
    EXPECT_NE(e.find("not valid JSON"), std::string::npos) << text << ": " << e;
  }
}

TEST(UpgradeRules, SyntaxErrorKeepsEarlierFindings) {
  EXPECT_EQ(check("import torch.distributed as dist\ndist.reduce_scatter_tensor\nx = (]\n"),
            (std::vector<std::string>{"2:6 UPG102", "3:6 UPG903"}));
}

TEST(UpgradeCuda, PinLines) {
  auto codes = [](std::string_view line, PinFileKind kind) {
    std::vector<std::string> out;
    for (const auto& f : check_pin_line(line, 1, 0, kind)) out.push_back(fmt::format("{}@{}", f.code, f.col));
    return out;
  };
  EXPECT_EQ(codes("torch==2.4.0+cu124", PinFileKind::requirements), (std::vector<std::string>{"UPG303@14"}));
  EXPECT_EQ(codes("torch==2.9.0+cu130", PinFileKind::requirements), std::vector<std::string>{});
  EXPECT_EQ(codes("--index-url https://download.pytorch.org/whl/nightly/cu129", PinFileKind::requirements),
            (std::vector<std::string>{"UPG303@54"}));
  EXPECT_EQ(codes("https://example.com/page#cu121", PinFileKind::requirements), std::vector<std::string>{});
  EXPECT_EQ(codes("  - pytorch-cuda==11.8", PinFileKind::conda), (std::vector<std::string>{"UPG304@5"}));
  EXPECT_EQ(codes("  - cuda-version>=12.4", PinFileKind::conda), std::vector<std::string>{});
  EXPECT_EQ(codes("  - cuda-version<13", PinFileKind::conda), (std::vector<std::string>{"UPG304@5"}));
  EXPECT_EQ(codes("nvidia-nccl-cu13", PinFileKind::requirements), std::vector<std::string>{});
  EXPECT_EQ(codes("cupy-cuda117", PinFileKind::requirements), (std::vector<std::string>{"UPG306@1"}));
  EXPECT_EQ(codes("FROM --platform=linux/amd64 nvidia/cuda:11.8.0-base", PinFileKind::dockerfile),
            (std::vector<std::string>{"UPG305@29"}));
  EXPECT_EQ(codes("FROM nvidia/cuda:13.0.1-devel-ubuntu24.04", PinFileKind::dockerfile), std::vector<std::string>{});
  EXPECT_EQ(codes("ENV CUDA_VERSION 12.9.1", PinFileKind::dockerfile), (std::vector<std::string>{"UPG305@5"}));
  EXPECT_EQ(codes("# FROM nvidia/cuda:11.8.0-base", PinFileKind::dockerfile), std::vector<std::string>{});
  EXPECT_TRUE(pin_file_kind("requirements-dev.txt") == PinFileKind::requirements);
  EXPECT_TRUE(pin_file_kind("docker/Dockerfile.gpu") == PinFileKind::dockerfile);
  EXPECT_FALSE(pin_file_kind("notes.txt"));
}

TEST(UpgradeCuda, ProbeFakeInstall) {
  const fs::path root = fs::temp_directory_path() / fmt::format("lmcore_upgrade_cuda_{}", ::getpid());
  fs::remove_all(root);
  fs::create_directories(root / "bin");
  fs::create_directories(root / "lib64");
  {
    std::ofstream(root / "version.json") << R"({"cuda": {"name": "CUDA SDK", "version": "12.4.1"}})";
    std::ofstream nvcc(root / "bin" / "nvcc");
    nvcc << "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
            "echo 'Cuda compilation tools, release 12.4, V12.4.131'\n";
    std::ofstream(root / "lib64" / "libcudart.so.12.4.127") << "not an ELF file";
  }
  fs::permissions(root / "bin" / "nvcc", fs::perms::owner_all);
  const auto found = probe_cuda({root});
  std::vector<std::string> got;
  for (const auto& c : found) got.push_back(fmt::format("{} {} {}", c.component, c.source, c.version));
  EXPECT_EQ(got, (std::vector<std::string>{"toolkit nvcc --version 12.4.131", "toolkit version.json 12.4.1",
                                           "runtime file name 12.4.127"}));
  const auto findings = cuda_component_findings(found);
  ASSERT_EQ(findings.size(), 3u);
  EXPECT_EQ(findings[0].code, "UPG301");
  EXPECT_EQ(findings[2].code, "UPG302");
  fs::remove_all(root);
}

TEST(UpgradeCuda, ProbeThisMachine) {
  // This machine's image installs CUDA 13.0 under /usr/local/cuda; where it does, the probe must
  // report the same release as `nvcc --version` and no UPG301/302 findings.
  const auto found = probe_cuda({});
  if (!fs::exists("/usr/local/cuda/bin/nvcc")) {
    for (const auto& c : found) EXPECT_FALSE(c.path.empty());
    return;
  }
  bool nvcc = false, runtime = false;
  for (const auto& c : found) {
    if (c.source == "nvcc --version") {
      nvcc = true;
      EXPECT_GE(c.major, 13) << c.path;
    }
    if (c.component == "runtime") runtime = true;
  }
  EXPECT_TRUE(nvcc);
  EXPECT_TRUE(runtime);
  EXPECT_TRUE(cuda_component_findings(found).empty());
}

TEST(UpgradeReport, FormatsAndEscapes) {
  Finding f;
  f.path = "a,b:c.py";
  f.line = 3;
  f.col = 7;
  f.end_line = 3;
  f.end_col = 9;
  f.code = "UPG201";
  f.message = "100% sure\nnot";
  f.confidence = Confidence::low;
  EXPECT_EQ(format_findings({f}, OutputFormat::text), "a,b:c.py:3:7: UPG201 100% sure\nnot\n");
  EXPECT_EQ(format_findings({f}, OutputFormat::github),
            "::warning title=upgrade-check (UPG201),file=a%2Cb%3Ac.py,line=3,col=7,endLine=3,endColumn=9::"
            "a,b:c.py:3:7: UPG201 100%25 sure%0Anot\n");
  const auto j = nlohmann::json::parse(format_findings({f}, OutputFormat::json));
  EXPECT_EQ(j[0]["confidence"], "low");
  EXPECT_TRUE(j[0]["fix"].is_null());
  const auto s = nlohmann::json::parse(format_findings({f}, OutputFormat::sarif));
  EXPECT_EQ(s["runs"][0]["tool"]["driver"]["rules"].size(), all_rules().size());
  EXPECT_EQ(s["runs"][0]["results"][0]["ruleId"], "UPG201");
  const int idx = s["runs"][0]["results"][0]["ruleIndex"];
  EXPECT_EQ(s["runs"][0]["tool"]["driver"]["rules"][idx]["id"], "UPG201");
  // Every rule is documented, and codes are unique.
  std::set<std::string_view> codes;
  for (const auto& r : all_rules()) {
    EXPECT_TRUE(codes.insert(r.code).second) << r.code;
    EXPECT_GT(r.explanation.size(), 20u) << r.code;
  }
  EXPECT_NE(format_rules().find("UPG101 renamed-all-gather-into-tensor (fixable)"), std::string::npos);
}

TEST(UpgradeFix, UnifiedDiffHunks) {
  std::string before, after;
  for (int i = 1; i <= 20; ++i) {
    before += fmt::format("line {}\n", i);
    after += i == 2 || i == 3 || i == 15 ? fmt::format("LINE {}\n", i) : fmt::format("line {}\n", i);
  }
  const std::string d = unified_diff("x.py", before, after);
  EXPECT_EQ(d.substr(0, d.find("@@ -12")),
            "--- a/x.py\n+++ b/x.py\n@@ -1,6 +1,6 @@\n line 1\n-line 2\n-line 3\n+LINE 2\n+LINE 3\n line 4\n line 5\n"
            " line 6\n");
  EXPECT_NE(d.find("@@ -12,7 +12,7 @@\n line 12\n line 13\n line 14\n-line 15\n+LINE 15\n"), std::string::npos);
  EXPECT_EQ(unified_diff("x.py", "a\nb", "a\nc"), "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n");
  EXPECT_THROW(apply_edits("abcdef", {Edit{1, 3, "X"}, Edit{2, 4, "Y"}}), Error);
  EXPECT_EQ(apply_edits("abcdef", {Edit{4, 5, "Y"}, Edit{1, 3, "X"}, Edit{1, 3, "X"}}), "aXdYf");
}

// The filters live in the library (scan applies them; the CLI applies the same function to the CUDA
// probe's findings, which it used to filter by its own copy of the rules, without the UPG9xx rule).
TEST(Filters, FindingSelectedAppliesConfidenceSelectAndIgnore) {
  Finding f;
  f.code = "UPG301";
  f.confidence = Confidence::medium;
  ScanOptions o;
  EXPECT_TRUE(finding_selected(f, o));
  o.min_confidence = Confidence::high;
  EXPECT_FALSE(finding_selected(f, o));
  o.min_confidence = Confidence::low;
  o.select = {"UPG1"};
  EXPECT_FALSE(finding_selected(f, o));
  o.select = {"UPG3"};
  EXPECT_TRUE(finding_selected(f, o));
  o.ignore = {"UPG30"};
  EXPECT_FALSE(finding_selected(f, o));
  f.code = "UPG901";  // scan errors pass a select, not an ignore
  o.ignore = {};
  EXPECT_TRUE(finding_selected(f, o));
  o.ignore = {"UPG9"};
  EXPECT_FALSE(finding_selected(f, o));
  EXPECT_EQ(confidence_from_name("medium"), Confidence::medium);
  EXPECT_EQ(confidence_from_name("Medium"), std::nullopt);
}

}  // namespace
}  // namespace lmcore::upgrade

namespace lmcore::upgrade {
namespace {

// The prefilter may pass a file with no finding, never rule out one with a finding.
TEST(UpgradePrefilter, NeverRulesOutAFileWithAFinding) {
  const std::vector<std::string> with = {
      "import torch.distributed as dist\ndist.all_gather_into_tensor(a, b)\n",
      "from torch.distributed import reduce_scatter_tensor as rs\nrs(a, b)\n",
      "import torch\nx = torch.ones(2)\nx.names\n",
      "import torch\ndef f(t):\n    return t.rename('A', 'B')\n",
      "import torch\nt = torch.ones(2)\nt.sum('C')\n",
      "import torch\nt = torch.ones(2)\nt.sum \\\n  ('C')\n",
      "import torch\nt = torch.ones(2)\nt.kthvalue(f(x, (y)), 'C')\n",
      "import torch\nt = torch.ones(2)\nt.kthvalue(\n  2,\n  'C')\n",
      "import torch\nt = torch.ones(2)\nt.softmax(dim = r'C')\n",
      "import torch\nt = torch.ones(2)\nt.sum(dim=\n  ('C', 'H'))\n",
      "from torch import sum as s\ns(t, 'C')\n",
      "import torch\ns = torch.sum\ns(t, 'C')\n",
      "import torch as T\ns = T.sum\ns(t, 'C')\n",
      // A comment between the comma (or the dot) and the name.
      "import torch\nt = torch.ones(2)\nt.kthvalue(2,  # k\n           dim='C')\n",
      "import torch\nt = torch.ones(2)\nprint((t.  # the names\n       names))\n",
      // Inside brackets a line end is white space, between a keyword and its `=` or a name and its `(`.
      "import torch\nt = torch.ones(2)\nt.softmax(dim\n          ='C')\n",
      "import torch\nt = torch.ones(2)\nx = (t.sum\n     ('C'))\n",
      // Found by fuzzing: an import over a line end inside brackets, PEP 701 quotes in an f-string's
      // field, torch.x when torch is not imported (an unknown receiver), a name after a line end.
      "(from torch import sum as\ns(t, 'C'))\n",
      "import torch\nt = torch.ones(2)\nprint(f\"{\"C\" + t.names}\")\n",
      "torch.rename('A', 'B')\n",
      "import torch\n.rename('A', 'B')\n",
      "x = 'import torch'\ntorch.rename('A', 'B')\n",
      // Lone CR line ends: comments end there too.
      "import torch # x\rt = torch.ones(2)\rt.names\r",
      "import torch\nt = torch.ones(2)\nprint(f\"don't {t.sum('C')}\")\n",
      "import torch\nlayer = torch.nn.Unflatten('C', (('A', 2), ('B', 3)))\n",
      "import torch\nt = torch.ones(2)\nprint(f\"{t.names}\")\n",
      "import torch\nz = torch.zeros(2, names=None)\n",
      "import torch\nt = torch.ones(2)\nt.unflatten('C', ((\"A\", 1), (\"B\", 2)))\n",
      "import torch\nt = torch.ones(2)\nt.unflatten(1, sizes=((\"A\", 1), (\"B\", 2)))\n",
      "import torch\nf = torch.Tensor.rename\n",
      // Found by fuzzing (a file shorter than 64 bytes): an attribute after a number and a dot.
      "iimm.krcrnmesn(\"oC\")0x.nm0x.unflatten(\"C\")0x.nmo(\"C\")romk.",
      // ... and `import torch` that is no statement of its own (after a word, inside brackets) binds
      // nothing: torch.align_as is then an unknown name's.
      "i      import torch\nt = torch.align_as()\n",
      "x = f(\nimport torch\nt = torch.align_as()\n",
      "x = '''unterminated\n",  // syntax errors: the tokenizer must see them
      "x = 'unterminated\n",
  };
  for (const auto& src : with) {
    const auto found = check_python_source(src, {});
    EXPECT_FALSE(found.empty()) << src;
    EXPECT_TRUE(may_have_python_findings(src)) << src;
  }
  // Names in comments and strings, and calls without a quote in them, are not candidates.
  for (const std::string src : {"import numpy as np\nx = np.zeros(3)\nprint(x.sum(0), x.max())\n",
                                "# t.names and dist.all_gather_into_tensor\n\"\"\"t.sum('C')\"\"\"\nx = 1\n",
                                "s = 'names'\nb = b\"rename\"\n", "def f(dim=0):\n    return dim == 'C'\n",
                                // unflatten with plain sizes stays.
                                "import torch\nt.unflatten(1, (2, 2))\nu = torch.unflatten(t, 0, (1, 2))\n",
                                // An apostrophe in an f-string's text opens no string; .max is no alias of torch.
                                "import torch\nmsg = f\"can't {x}\"\nhigh = torch.finfo(t).max\nm = stats.mean\n"}) {
    EXPECT_FALSE(may_have_python_findings(src)) << src;
    EXPECT_TRUE(check_python_source(src, {}).empty()) << src;
  }
}

// Every .py file of both corpora: a file with a UPG1xx/UPG2xx finding passes the prefilter.
TEST(UpgradePrefilter, PassesEveryCorpusFileWithAFinding) {
  int checked = 0;
  for (const char* root : {LMCORE_UPGRADE_CORPUS, LMCORE_UPGRADE_PRECISION}) {
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.path().extension() != ".py") continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      bool finding = false;
      for (const auto& f : check_python_source(src, {}))
        finding |= f.code.rfind("UPG1", 0) == 0 || f.code.rfind("UPG2", 0) == 0;
      if (finding) {
        ++checked;
        EXPECT_TRUE(may_have_python_findings(src)) << e.path();
      }
    }
  }
  EXPECT_GE(checked, 15);
}

}  // namespace
}  // namespace lmcore::upgrade
