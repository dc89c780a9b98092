// lmcore/upgrade/dim_params.h — the PyTorch ops whose parameters accept a dimension name, with the
// position and keyword of each parameter as PyTorch 1.13 declares them (the last release before
// named tensors were removed). UPG210 binds a call's arguments to these signatures the way Python
// would, and reports a string literal only where it lands on a dimension parameter.
//
//   for (const auto& o : upgrade::dim_overloads("flatten")) fmt::print("{}\n", upgrade::signature_text(o, false));
//   // Tensor.flatten(start_dim, end_dim, out_dim: Dimname)
//   // Tensor.flatten(start_dim: Dimname, end_dim: Dimname, out_dim: Dimname)
//   // Tensor.flatten(dims: Sequence[Dimname], out_dim: Dimname)
//
// Source: the Dimname overloads in torch/_C/__init__.pyi (class _TensorBase) and
// torch/_C/_VariableFunctions.pyi of torch 1.13, plus Tensor.size and Tensor.stride, whose Dimname
// overloads are bound by hand in C++ and are missing from the .pyi. Left out, because other rules
// own them: rename/rename_/refine_names/align_to (UPG202..UPG204), unflatten (UPG209) and the
// `names=` of factory functions (UPG207). tests/python/test_upgrade_check.py re-derives the table
// from torch's .pyi files and compares it with what `lmcore upgrade-check --rules` prints.
//
// What PyTorch accepts as a name (checked against torch 1.13): a Dimname parameter takes one string;
// a Sequence[Dimname] parameter takes a string or a tuple/list of strings; each string must be a
// Python identifier ([A-Za-z_][A-Za-z0-9_]*), so `unbind("<KeyPress>")` passes no dimension name.
// Tensor.norm is not here: its named overloads are rejected at run time in 1.13, so `t.norm('fro')`
// and `t.norm(p='nuc')` are the norm's `p`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lmcore::upgrade {

enum class DimKind : std::uint8_t {
  other,  // not a dimension parameter (an int, a tensor, a flag, ...)
  name,   // Dimname: one string
  names,  // Sequence[Dimname]: a string, or a tuple/list of strings
};

struct DimParam {
  std::string_view name;
  DimKind kind = DimKind::other;
  bool has_default = false;
  bool keyword_only = false;  // after `*` in the signature
};

// One overload. The Tensor method form takes `params`; the torch.<op> function form takes the
// subject first (`input`, or `tensors` for cat/concat/concatenate) and also accepts `out=`.
struct DimOverload {
  std::string_view op;
  std::vector<DimParam> params;
  bool tensor_method = false;   // exists as Tensor.<op>
  bool torch_function = false;  // exists as torch.<op>
  std::string_view subject;     // first parameter of the function form
};

// Every overload, in table order.
const std::vector<DimOverload>& all_dim_overloads();
// The overloads of one op (empty when the op takes no dimension name).
std::span<const DimOverload> dim_overloads(std::string_view op);
// True when some op of the table has a parameter named `keyword` that takes a dimension name.
bool is_dim_keyword(std::string_view keyword);

// `Tensor.op(params)` (function_form = false) or `torch.op(subject, params)` (`out=` not shown), with the
// parameter types written `Dimname` / `Sequence[Dimname]` and defaults as `=`.
std::string signature_text(const DimOverload& o, bool function_form);

// True when `s` is a string the way PyTorch accepts it as a dimension name (see above): a Python
// identifier. `literal` is the token's source text including prefix and quotes; raw/byte/f-strings
// and strings with escapes are not names.
bool is_dim_name_literal(std::string_view literal);

}  // namespace lmcore::upgrade
