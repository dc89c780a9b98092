// The table of ops that take dimension names, written from torch 1.13's signatures. See
// include/lmcore/upgrade/dim_params.h for the source and what is left out.
#include "lmcore/upgrade/dim_params.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "lmcore/base/error.h"

namespace lmcore::upgrade {

namespace {

// Each row: the op, its parameters in the Tensor method's order (self left out) in PyTorch's own
// spelling, shortened: `: D` is Dimname, `: DL` is Sequence[Dimname], `=` marks a default, `*`
// starts the keyword-only ones. `T` = Tensor method, `F` = torch function (the tensor first).
struct Row {
  std::string_view op;
  std::string_view params;
  std::string_view where;
};

constexpr std::array<Row, 56> kRows = {{
    {"all", "dim: D, keepdim=", "TF"},
    {"any", "dim: D, keepdim=", "TF"},
    {"argsort", "dim: D, descending=", "TF"},
    {"cat", "dim: D", "F"},  // torch.cat(tensors, dim)
    {"concat", "dim: D", "F"},
    {"concatenate", "dim: D", "F"},
    {"cummax", "dim: D", "TF"},
    {"cummin", "dim: D", "TF"},
    {"cumprod", "dim: D, *, dtype=", "TF"},
    {"cumprod_", "dim: D, *, dtype=", "T"},
    {"cumsum", "dim: D, *, dtype=", "TF"},
    {"cumsum_", "dim: D, *, dtype=", "T"},
    {"diagonal", "*, outdim: D, dim1: D, dim2: D, offset=", "TF"},
    {"flatten", "start_dim, end_dim, out_dim: D", "TF"},
    {"flatten", "start_dim: D, end_dim: D, out_dim: D", "TF"},
    {"flatten", "dims: DL, out_dim: D", "TF"},
    {"gather", "dim: D, index, *, sparse_grad=", "TF"},
    {"index_add", "dim: D, index, source, *, alpha=", "TF"},
    {"index_copy", "dim: D, index, source", "TF"},
    {"index_copy_", "dim: D, index, source", "T"},
    {"index_fill", "dim: D, index, value", "TF"},
    {"index_fill_", "dim: D, index, value", "T"},
    {"index_select", "dim: D, index", "TF"},
    {"kthvalue", "k, dim: D, keepdim=", "TF"},
    {"log_softmax", "dim: D, *, dtype=", "TF"},
    {"logcumsumexp", "dim: D", "TF"},
    {"logsumexp", "dim: DL, keepdim=", "TF"},
    {"max", "dim: D, keepdim=", "TF"},
    {"mean", "dim: DL, keepdim=, *, dtype=", "TF"},
    {"median", "dim: D, keepdim=", "TF"},
    {"min", "dim: D, keepdim=", "TF"},
    {"mode", "dim: D, keepdim=", "TF"},
    {"nanmedian", "dim: D, keepdim=", "TF"},
    {"prod", "dim: D, keepdim=, *, dtype=", "TF"},
    {"scatter", "dim: D, index, src", "TF"},
    {"scatter", "dim: D, index, value", "TF"},
    {"scatter_add", "dim: D, index, src", "TF"},
    {"select", "dim: D, index", "TF"},
    {"size", "dim: D", "T"},  // bound by hand in torch/csrc; not in the .pyi
    {"softmax", "dim: D, *, dtype=", "TF"},
    {"sort", "*, stable, dim: D, descending=", "TF"},
    {"sort", "dim: D, descending=", "TF"},
    {"squeeze", "dim: D", "TF"},
    {"squeeze_", "dim: D", "T"},
    {"std", "dim: DL, *, correction, keepdim=", "TF"},
    {"std", "dim: DL, unbiased=, keepdim=", "TF"},
    {"std_mean", "dim: DL, *, correction, keepdim=", "F"},
    {"std_mean", "dim: DL, unbiased=, keepdim=", "F"},
    {"stride", "dim: D", "T"},  // bound by hand in torch/csrc; not in the .pyi
    {"sum", "dim: DL, keepdim=, *, dtype=", "TF"},
    {"transpose", "dim0: D, dim1: D", "TF"},
    {"unbind", "dim: D", "TF"},
    {"var", "dim: DL, *, correction, keepdim=", "TF"},
    {"var", "dim: DL, unbiased=, keepdim=", "TF"},
    {"var_mean", "dim: DL, *, correction, keepdim=", "F"},
    {"var_mean", "dim: DL, unbiased=, keepdim=", "F"},
}};

std::vector<DimParam> parse_params(std::string_view s) {
  std::vector<DimParam> out;
  bool kw_only = false;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t comma = s.find(", ", pos);
    if (comma == std::string_view::npos) comma = s.size();
    std::string_view p = s.substr(pos, comma - pos);
    pos = comma + 2;
    if (p == "*") {
      kw_only = true;
      continue;
    }
    DimParam d;
    d.keyword_only = kw_only;
    if (!p.empty() && p.back() == '=') {
      d.has_default = true;
      p.remove_suffix(1);
    }
    const std::size_t colon = p.find(": ");
    if (colon != std::string_view::npos) {
      const std::string_view type = p.substr(colon + 2);
      LMCORE_CHECK(type == "D" || type == "DL", "dim table: unknown type '{}' in '{}'", type, s);
      d.kind = type == "D" ? DimKind::name : DimKind::names;
      p = p.substr(0, colon);
    }
    d.name = p;
    out.push_back(d);
  }
  return out;
}

struct Table {
  std::vector<DimOverload> overloads;  // sorted by op, table order within an op
  std::vector<std::string_view> keywords;
};

const Table& table() {
  static const Table t = [] {
    Table t;
    auto add = [&](const Row& r) {
      DimOverload o;
      o.op = r.op;
      o.params = parse_params(r.params);
      o.tensor_method = r.where.find('T') != std::string_view::npos;
      o.torch_function = r.where.find('F') != std::string_view::npos;
      o.subject = (r.op == "cat" || r.op == "concat" || r.op == "concatenate") ? "tensors" : "input";
      t.overloads.push_back(std::move(o));
    };
    for (const Row& r : kRows) add(r);
    std::stable_sort(t.overloads.begin(), t.overloads.end(),
                     [](const DimOverload& a, const DimOverload& b) { return a.op < b.op; });
    for (const auto& o : t.overloads)
      for (const auto& p : o.params)
        if (p.kind != DimKind::other && std::find(t.keywords.begin(), t.keywords.end(), p.name) == t.keywords.end())
          t.keywords.push_back(p.name);
    return t;
  }();
  return t;
}

}  // namespace

const std::vector<DimOverload>& all_dim_overloads() { return table().overloads; }

std::span<const DimOverload> dim_overloads(std::string_view op) {
  const auto& v = table().overloads;
  const auto lo = std::lower_bound(v.begin(), v.end(), op, [](const DimOverload& o, std::string_view k) { return o.op < k; });
  auto hi = lo;
  while (hi != v.end() && hi->op == op) ++hi;
  return {v.data() + (lo - v.begin()), static_cast<std::size_t>(hi - lo)};
}

bool is_dim_keyword(std::string_view keyword) {
  const auto& k = table().keywords;
  return std::find(k.begin(), k.end(), keyword) != k.end();
}

std::string signature_text(const DimOverload& o, bool function_form) {
  std::string s = fmt::format("{}.{}(", function_form ? "torch" : "Tensor", o.op);
  bool first = true, star = false;
  auto sep = [&] {
    if (!first) s += ", ";
    first = false;
  };
  if (function_form) {
    sep();
    s += o.subject;
  }
  for (const auto& p : o.params) {
    if (p.keyword_only && !star) {
      sep();
      s += '*';
      star = true;
    }
    sep();
    s += p.name;
    if (p.kind == DimKind::name) s += ": Dimname";
    if (p.kind == DimKind::names) s += ": Sequence[Dimname]";
    if (p.has_default) s += '=';
  }
  return s + ")";
}

bool is_dim_name_literal(std::string_view lit) {
  std::size_t i = 0;
  while (i < lit.size() && lit[i] != '\'' && lit[i] != '"') {
    const char c = static_cast<char>(lit[i] | 0x20);
    if (c != 'r' && c != 'u') return false;  // bytes and f-strings are not names
    ++i;
  }
  if (i >= lit.size()) return false;
  const char q = lit[i];
  std::size_t quote = (i + 2 < lit.size() && lit[i + 1] == q && lit[i + 2] == q) ? 3 : 1;
  if (lit.size() < i + 2 * quote) return false;
  const std::string_view body = lit.substr(i + quote, lit.size() - i - 2 * quote);
  // c10::Dimname::isValidName: [A-Za-z_][A-Za-z0-9_]*, ASCII only.
  if (body.empty()) return false;
  for (std::size_t k = 0; k < body.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(body[k]);
    const bool alpha = (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    if (alpha || c == '_' || (k > 0 && c >= '0' && c <= '9')) continue;
    return false;
  }
  return true;
}

}  // namespace lmcore::upgrade
