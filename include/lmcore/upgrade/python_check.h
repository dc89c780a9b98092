// lmcore/upgrade/python_check.h — the Python rules of upgrade-check (UPG1xx renames, UPG2xx named
// tensors) over one source file or the code cells of one notebook.
//
//   upgrade::PythonContext ctx;
//   ctx.module = "mypkg.train";                       // optional: resolves relative imports
//   auto findings = upgrade::check_python_source(text, ctx);
//   for (auto& f : findings) fmt::print("{}:{}: {} {}\n", f.line, f.col, f.code, f.message);
//
// How names are resolved (flow-insensitive, per file — the limits are listed in all_rules()):
//  * every `import a.b [as c]` and `from [..]m import x [as y]` / `*` anywhere in the file binds a
//    local name to a qualified name; relative imports resolve against ctx.module;
//  * `name = dotted.ref` binds an alias; top-level `def`/`class` bind ctx.module.name;
//  * a dotted chain `head.a.b` resolves head through those bindings, then appends attributes;
//  * a name counts as a known tensor when the file assigns it from a torch call (`x = torch.ones(2)`)
//    or annotates it `torch.Tensor` / `torch.nn.Parameter` (parameters included).
// Only code tokens are looked at, so comments, strings and docstrings never produce findings;
// f-string replacement fields are code and are checked. `# noqa` and `# noqa: UPG101,UPG2` (code
// prefixes allowed) on a finding's line suppress it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcore/upgrade/rules.h"

namespace lmcore::upgrade {

struct PythonContext {
  std::string module;            // dotted module name of the file, "" if unknown
  bool is_package_init = false;  // the file is the package's __init__.py
};

// Evidence of a tensor (UPG2xx). A named-tensor finding is certain to be about PyTorch when its
// receiver is known to be a tensor or its callee resolves to torch. Otherwise it rests on where the
// receiver's value comes from:
//  * from a call of a function of another module (`np.dtype(...).names`, or `arr.names` after
//    `arr = np.zeros(3)`): that module must import torch (a module of the scanned tree that does);
//  * from anywhere else (a parameter, an attribute, a local): the file must import torch, or import
//    a module of the scanned tree that does (one step: the module it may get the value from).
// With that evidence the finding keeps the confidence its rule gives (medium, or high for names
// unique to named tensors); without it, it is lowered to low, below the default --min-confidence
// (medium). check_python_source and check_python_cells settle this from the file alone (an
// imported module's imports are not known there); scan() settles it over the scanned tree.
struct PythonCheck {
  std::vector<Finding> findings;           // sorted with finding_less
  std::vector<std::uint8_t> needs_torch;   // per finding: 1 when it rests on evidence (above)
  std::vector<std::string> value_sources;  // per finding: the function its receiver comes from, or ""
  std::vector<std::string> imports;        // absolute names of the modules the file imports
  bool imports_torch = false;              // imports torch (or is a module of the torch package)
};

// Checks one Python source (or, with `cells`, a notebook's cells as one program) without settling
// the findings that rest on evidence; pass the result to settle_torch_evidence.
PythonCheck check_python(const std::vector<std::string_view>& sources, bool cells, const PythonContext& ctx);

// Whether the module of that name, in the scanned tree, imports torch; nullopt when it is not there.
using ModuleImportsTorch = std::function<std::optional<bool>(std::string_view module)>;

// Settles the findings that rest on evidence: `file_evidence` is whether the file or a module it
// imports imports torch; `modules` answers for the module a value comes from (the longest prefix
// of its function's qualified name that is a module of the tree; none: no evidence). Lowered
// findings get confidence low; every settled finding gets its confidence note in its message.
void settle_torch_evidence(PythonCheck& check, bool file_evidence, const ModuleImportsTorch& modules);

// False only when `source` cannot give any UPG1xx/UPG2xx finding: none of the names the rules
// start from appears in its bytes (see src/upgrade/prefilter.cpp for the list and why it is
// complete). It does not tokenize, so a file it rules out is not checked for syntax (UPG903) or
// encoding (UPG902) errors either; such an error could hide no finding there. Cheap: one pass over
// the bytes, a table lookup per identifier.
bool may_have_python_findings(std::string_view source);

// Checks one Python source. Findings carry line/col (path is left empty); fixes are byte edits into
// `source`. Tokenizer and encoding errors become UPG903 / UPG902 findings. Torch evidence comes
// from the file's own imports.
std::vector<Finding> check_python_source(std::string_view source, const PythonContext& ctx);

// Checks the code cells of a notebook as one program (imports in one cell apply to later cells).
// Findings have `cell` set to the 1-based index into `cells`; fixes are byte edits into that cell.
std::vector<Finding> check_python_cells(const std::vector<std::string>& cells, const PythonContext& ctx);

}  // namespace lmcore::upgrade
