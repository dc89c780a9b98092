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

#include <string>
#include <string_view>
#include <vector>

#include "lmcore/upgrade/rules.h"

namespace lmcore::upgrade {

struct PythonContext {
  std::string module;            // dotted module name of the file, "" if unknown
  bool is_package_init = false;  // the file is the package's __init__.py
};

// Checks one Python source. Findings carry line/col (path is left empty); fixes are byte edits into
// `source`. Tokenizer and encoding errors become UPG903 / UPG902 findings.
std::vector<Finding> check_python_source(std::string_view source, const PythonContext& ctx);

// Checks the code cells of a notebook as one program (imports in one cell apply to later cells).
// Findings have `cell` set to the 1-based index into `cells`; fixes are byte edits into that cell.
std::vector<Finding> check_python_cells(const std::vector<std::string>& cells, const PythonContext& ctx);

}  // namespace lmcore::upgrade
