// The Python rules of upgrade-check: name resolution over the token stream, then the rename
// (UPG1xx) and named-tensor (UPG2xx) checks. See include/lmcore/upgrade/python_check.h.
//
// Two passes over the significant tokens (comments and NL dropped) of every unit (a file, or each
// notebook cell, plus each f-string replacement field as its own small unit):
//   1. bindings: imports, `x = dotted` aliases, top-level defs, tensor-typed names;
//   2. findings: dotted chains resolved through the bindings, attribute accesses, call arguments.
#include "lmcore/upgrade/python_check.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "lmcore/upgrade/dim_params.h"
#include "lmcore/upgrade/tokenizer.h"

namespace lmcore::upgrade {

namespace {

// ---- the tables --------------------------------------------------------------------------------

struct Rename {
  std::string_view qualified;  // canonical qualified name
  std::string_view old_name;
  std::string_view new_name;
  std::string_view code;
};

constexpr std::array<Rename, 8> kRenames = {{
    {"torch.distributed.all_gather_into_tensor", "all_gather_into_tensor", "all_gather_single", "UPG101"},
    {"torch.distributed.reduce_scatter_tensor", "reduce_scatter_tensor", "reduce_scatter_single", "UPG102"},
    {"torch.distributed._functional_collectives.all_gather_tensor", "all_gather_tensor", "all_gather_single",
     "UPG103"},
    {"torch.distributed._functional_collectives.all_gather_tensor_autograd", "all_gather_tensor_autograd",
     "all_gather_single_autograd", "UPG103"},
    {"torch.distributed._functional_collectives.reduce_scatter_tensor", "reduce_scatter_tensor",
     "reduce_scatter_single", "UPG103"},
    {"torch.distributed._functional_collectives.reduce_scatter_tensor_autograd", "reduce_scatter_tensor_autograd",
     "reduce_scatter_single_autograd", "UPG103"},
    {"torch.distributed._functional_collectives.all_gather_into_tensor_coalesced",
     "all_gather_into_tensor_coalesced", "all_gather_single_coalesced", "UPG104"},
    {"torch.distributed._functional_collectives.reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_coalesced",
     "reduce_scatter_single_coalesced", "UPG104"},
}};

constexpr std::string_view kAlignTensors = "torch.align_tensors";

// Identifiers that can end a chain naming a rename target or torch.align_tensors: a chain without
// one of these (or a head bound directly to a target) cannot produce a UPG1xx/UPG208 finding.
bool is_target_leaf(std::string_view w) {
  switch (w.size()) {
    case 13: return w == "align_tensors";
    case 17: return w == "all_gather_tensor";
    case 21: return w == "reduce_scatter_tensor";
    case 22: return w == "all_gather_into_tensor";
    case 26: return w == "all_gather_tensor_autograd";
    case 30: return w == "reduce_scatter_tensor_autograd";
    case 31: return w == "reduce_scatter_tensor_coalesced";
    case 32: return w == "all_gather_into_tensor_coalesced";
    default: return false;
  }
}

// Maps other spellings of the same function to the canonical qualified name.
std::string canonical(std::string_view q) {
  constexpr std::string_view c10d = "torch.distributed.distributed_c10d.";
  if (q.substr(0, c10d.size()) == c10d) return fmt::format("torch.distributed.{}", q.substr(c10d.size()));
  return std::string(q);
}

const Rename* find_rename(std::string_view qualified) {
  const std::string c = canonical(qualified);
  for (const auto& r : kRenames)
    if (r.qualified == c) return &r;
  return nullptr;
}

bool is_torch_factory(std::string_view f) {
  static constexpr std::array<std::string_view, 16> names = {
      "empty", "zeros", "ones", "full", "rand", "randn", "randint", "tensor", "empty_like", "zeros_like",
      "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "as_tensor"};
  return std::find(names.begin(), names.end(), f) != names.end();
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// ---- units ---------------------------------------------------------------------------------------

struct Binding {
  std::string qualified;  // "" never; unresolved relative imports start with '.'
  bool aliased = false;   // bound by `as` (or `x = ...`): the local name is not the imported name
  bool from_import = false;
  int line = 0;
  bool local_def = false;  // a top-level def/class of this module
  bool assigned = false;   // bound by `name = dotted`
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BindingMap = std::unordered_map<std::string, Binding, StringHash, std::equal_to<>>;
using NameSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;

// The tokens the rules walk: a file's or cell's own (borrowed from its TokenizedSource), or an
// f-string replacement field's (tokenized separately and shifted to the enclosing file's offsets).
struct Unit {
  const TokenizedSource* src = nullptr;  // for text and positions (a field unit points at its parent)
  const Token* tok = nullptr;
  const BracketPairs* pairs = nullptr;  // borrowed; null for a field unit (own_pairs: units get moved)
  int n = 0;
  int cell = 0;
  bool field = false;                    // an f-string replacement field
  std::vector<Token> own_tok;            // storage for field units
  BracketPairs own_pairs;

  // Byte k of token i (an operator's first bytes decide most comparisons).
  char byte(int i, std::uint32_t k) const { return src->source[tok[i].begin + k]; }
  std::uint32_t line(int i) const { return src->line_of(tok[i].begin); }
  // Index of the bracket matching token i, or -1 when token i is not a bracket.
  int match(int i) const {
    const Token& t = tok[i];
    if (t.kind != TokKind::op || t.end - t.begin != 1) return -1;
    const char c = byte(i, 0);
    if (c != '(' && c != '[' && c != '{' && c != ')' && c != ']' && c != '}') return -1;
    return pairs ? (*pairs)(i) : own_pairs(i);
  }
};

void borrow_unit(Unit& u, const TokenizedSource& ts) {
  u.src = &ts;
  u.tok = ts.tokens.data();
  u.pairs = &ts.match;
  u.n = static_cast<int>(ts.tokens.size());
}

void own_unit(Unit& u, const TokenizedSource& parent, const TokenizedSource& sub, std::uint32_t shift) {
  u.src = &parent;
  u.own_tok = sub.tokens;
  for (Token& t : u.own_tok) {
    t.begin += shift;
    t.end += shift;
  }
  u.own_pairs = sub.match;
  u.tok = u.own_tok.data();
  u.pairs = nullptr;
  u.n = static_cast<int>(u.own_tok.size());
}

struct NoqaLine {
  bool all = false;
  std::vector<std::string> codes;  // upper-cased, prefixes allowed
};

// `# noqa` or `# noqa: A1, B2` (flake8 syntax, case-insensitive keyword).
std::unordered_map<std::uint32_t, NoqaLine> noqa_lines(const TokenizedSource& ts) {
  std::unordered_map<std::uint32_t, NoqaLine> out;
  for (const Token& t : ts.comments) {
    std::string_view c = ts.text(t);
    // Nearly no comment is a noqa one: two memchr calls rule most out before the byte-wise search.
    if (!std::memchr(c.data(), 'q', c.size()) && !std::memchr(c.data(), 'Q', c.size())) continue;
    std::size_t k = std::string_view::npos;
    for (std::size_t i = 0; i + 4 <= c.size(); ++i) {
      if ((c[i] | 0x20) == 'n' && (c[i + 1] | 0x20) == 'o' && (c[i + 2] | 0x20) == 'q' && (c[i + 3] | 0x20) == 'a') {
        k = i;
        break;
      }
    }
    if (k == std::string_view::npos) continue;
    // Must be `#` then optional spaces then noqa.
    std::size_t j = 1;
    while (j < k && (c[j] == ' ' || c[j] == '\t')) ++j;
    if (j != k) continue;
    NoqaLine& n = out[ts.line(t)];
    std::size_t p = k + 4;
    while (p < c.size() && c[p] == ' ') ++p;
    if (p < c.size() && c[p] == ':') {
      ++p;
      std::string code;
      for (; p <= c.size(); ++p) {
        const char ch = p < c.size() ? c[p] : ',';
        if (std::isalnum(static_cast<unsigned char>(ch))) {
          code += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        } else if (ch == ',' || ch == ' ' || ch == '\t') {
          if (!code.empty()) n.codes.push_back(code), code.clear();
          if (ch != ',' && ch != ' ' && ch != '\t') break;
        } else {
          if (!code.empty()) n.codes.push_back(code);
          break;
        }
      }
      if (n.codes.empty()) n.all = true;
    } else {
      n.all = true;
    }
  }
  return out;
}

bool noqa_suppresses(const NoqaLine& n, std::string_view code) {
  if (n.all) return true;
  for (const auto& c : n.codes)
    if (starts_with(code, c)) return true;
  return false;
}

// ---- the checker ---------------------------------------------------------------------------------

enum class Receiver { unknown, tensor, tensor_class, not_tensor };

struct Arg {
  int begin = 0, end = 0;  // token range of the whole argument
  int kw = -1;             // index of the keyword name token, or -1
  int value = 0;           // first token of the value
  bool star = false;       // *args or **kwargs
};

class Checker {
 public:
  explicit Checker(const PythonContext& ctx) : ctx_(ctx) {}

  PythonCheck run(const std::vector<std::string_view>& sources, bool notebook) {
    // Token storage is reused across the files a worker thread checks: tokenizing is a hot loop
    // and fresh vectors cost page faults.
    thread_local std::vector<std::unique_ptr<TokenizedSource>> pool;
    while (pool.size() < sources.size() + 1) pool.push_back(std::make_unique<TokenizedSource>());
    TokenizedSource& sub = *pool.back();
    std::vector<Unit> units;
    units.reserve(sources.size());
    std::vector<std::unordered_map<std::uint32_t, NoqaLine>> noqa;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      TokenizedSource& ts = *pool[i];
      tokenize_into(sources[i], ts);
      const int cell = notebook ? static_cast<int>(i) + 1 : 0;
      noqa.push_back(noqa_lines(ts));
      if (ts.error) {
        Finding f;
        f.cell = cell;
        f.line = static_cast<int>(ts.error->line);
        f.col = static_cast<int>(ts.error->col);
        f.end_line = f.line;
        f.end_col = f.col + 1;
        f.code = ts.error->encoding ? "UPG902" : "UPG903";
        f.message = f.code == "UPG902" ? fmt::format("cannot decode: {}", ts.error->message)
                                       : fmt::format("syntax error: {}; tokens after it are not checked",
                                                     ts.error->message);
        findings_.push_back(std::move(f));
        weak_.push_back(0);
        sources_.emplace_back();
      }
      Unit u;
      u.cell = cell;
      borrow_unit(u, ts);
      units.push_back(std::move(u));
      for (const auto& [b, e] : ts.fstring_fields) {
        tokenize_into(ts.source.substr(b, e - b), sub);
        Unit fu;
        fu.cell = cell;
        fu.field = true;
        own_unit(fu, ts, sub, b);
        units.push_back(std::move(fu));
      }
    }
    for (const Unit& u : units)
      if (!u.field) collect_bindings(u);
    for (const Unit& u : units)
      if (!u.field) collect_tensor_annotations(u);
    for (const Unit& u : units) check_unit(u);

    // noqa, then order (the evidence flags travel with their findings).
    std::vector<std::size_t> keep;
    keep.reserve(findings_.size());
    for (std::size_t k = 0; k < findings_.size(); ++k) {
      const Finding& f = findings_[k];
      const auto& nq = noqa[notebook ? static_cast<std::size_t>(f.cell - 1) : 0];
      auto it = nq.find(static_cast<std::uint32_t>(f.line));
      if (it != nq.end() && noqa_suppresses(it->second, f.code)) continue;
      keep.push_back(k);
    }
    std::sort(keep.begin(), keep.end(),
              [&](std::size_t a, std::size_t b) { return finding_less(findings_[a], findings_[b]); });
    PythonCheck out;
    out.findings.reserve(keep.size());
    out.needs_torch.reserve(keep.size());
    out.value_sources.reserve(keep.size());
    for (const std::size_t k : keep) {
      out.findings.push_back(std::move(findings_[k]));
      out.needs_torch.push_back(weak_[k]);
      out.value_sources.push_back(std::move(sources_[k]));
    }
    out.imports_torch = ctx_.module == "torch" || starts_with(ctx_.module, "torch.");
    for (const auto& [local, b] : bindings_)
      if (!b.local_def && (b.qualified == "torch" || starts_with(b.qualified, "torch."))) out.imports_torch = true;
    for (const auto& m : star_modules_)
      if (m == "torch" || starts_with(m, "torch.")) out.imports_torch = true;
    std::sort(imports_.begin(), imports_.end());
    imports_.erase(std::unique(imports_.begin(), imports_.end()), imports_.end());
    out.imports = std::move(imports_);
    return out;
  }

 private:
  // -- token helpers
  static std::string_view text(const Unit& u, int i) {
    const Token& t = u.tok[i];
    return u.src->source.substr(t.begin, t.end - t.begin);
  }
  [[gnu::always_inline]] static bool is_op(const Unit& u, int i, std::string_view op) {
    if (i < 0 || i >= u.n) return false;
    const Token& t = u.tok[i];
    if (t.kind != TokKind::op || t.end - t.begin != op.size() || u.byte(i, 0) != op[0]) return false;
    return op.size() < 2 || (u.byte(i, 1) == op[1] && (op.size() < 3 || text(u, i) == op));
  }
  static bool is_name(const Unit& u, int i) {
    return i >= 0 && i < u.n && u.tok[i].kind == TokKind::name;
  }
  static bool is_word(const Unit& u, int i, std::string_view w) { return is_name(u, i) && text(u, i) == w; }
  static bool statement_start(const Unit& u, int i) {
    if (i == 0) return true;
    const TokKind k = u.tok[i - 1].kind;
    return k == TokKind::newline || k == TokKind::indent || k == TokKind::dedent || is_op(u, i - 1, ";") ||
           is_op(u, i - 1, ":");
  }
  static bool ends_statement(const Unit& u, int i) {
    return i >= u.n || u.tok[i].kind == TokKind::newline ||
           u.tok[i].kind == TokKind::endmarker || is_op(u, i, ";");
  }

  // Reads `name(.name)*` from i; returns the index after it and fills `parts` with token indices.
  static int read_dotted(const Unit& u, int i, std::vector<int>& parts) {
    parts.clear();
    if (!is_name(u, i)) return i;
    parts.push_back(i++);
    while (is_op(u, i, ".") && is_name(u, i + 1)) {
      parts.push_back(i + 1);
      i += 2;
    }
    return i;
  }
  static std::string join(const Unit& u, const std::vector<int>& parts, std::size_t from = 0) {
    std::string s;
    for (std::size_t k = from; k < parts.size(); ++k) {
      if (!s.empty()) s += '.';
      s += text(u, parts[k]);
    }
    return s;
  }

  // 4096 bits: a large file binds a few hundred names, which would fill a smaller filter.
  static constexpr unsigned kBloomBits = 4096;
  static unsigned bloom_slot(std::string_view w) {
    const unsigned mid = static_cast<unsigned char>(w[w.size() / 2]);
    return (static_cast<unsigned>(w.size()) * 131u + static_cast<unsigned char>(w[0]) * 7u +
            static_cast<unsigned char>(w.back()) * 17u + mid * 257u) & (kBloomBits - 1);
  }
  const Binding* lookup(std::string_view name) const {
    // Most names are not bound; a 256-bit filter skips hashing them.
    if (name.empty()) return nullptr;
    const unsigned slot = bloom_slot(name);
    if (!(bloom_[slot >> 6] >> (slot & 63) & 1u)) return nullptr;
    auto it = bindings_.find(name);
    return it == bindings_.end() ? nullptr : &it->second;
  }

  void bind(std::string_view local, std::string qualified, bool aliased, bool from_import, int line,
            bool local_def = false, bool assigned = false) {
    // Flow-insensitive: the first binding into torch wins, so a later unrelated reuse of the name
    // does not hide it; a torch binding replaces a non-torch one.
    auto it = bindings_.find(local);
    const bool is_torch = starts_with(qualified, "torch");
    if (it != bindings_.end() && (starts_with(it->second.qualified, "torch") || !is_torch)) return;
    const unsigned slot = bloom_slot(local);
    bloom_[slot >> 6] |= std::uint64_t{1} << (slot & 63);
    bindings_.insert_or_assign(std::string(local),
                               Binding{std::move(qualified), aliased, from_import, line, local_def, assigned});
  }

  // Resolves a chain of name tokens to a qualified name, or "" when its head is not bound.
  std::string resolve(const Unit& u, const std::vector<int>& parts) const {
    if (parts.empty()) return "";
    const Binding* b = lookup(text(u, parts[0]));
    if (!b) return "";
    std::string q = b->qualified;
    for (std::size_t k = 1; k < parts.size(); ++k) {
      q += '.';
      q += text(u, parts[k]);
    }
    return q;
  }

  std::string resolve_relative(int dots, std::string_view rest) const {
    if (ctx_.module.empty()) return "";
    std::string pkg = ctx_.module;
    int up = ctx_.is_package_init ? dots - 1 : dots;
    for (; up > 0; --up) {
      const std::size_t k = pkg.rfind('.');
      if (k == std::string::npos) {
        if (up == 1) pkg.clear(), up = 0;
        else return "";
        break;
      }
      pkg.resize(k);
    }
    if (pkg.empty()) return std::string(rest);
    return rest.empty() ? pkg : fmt::format("{}.{}", pkg, rest);
  }

  // -- findings
  // `weak`: the receiver is not known to be a tensor, so the finding rests on the file's imports;
  // its message gets its confidence note when that is settled (settle_torch_evidence).
  Finding& add(const Unit& u, int tok_index, std::string_view code, std::string message, Confidence conf,
               bool weak = false) {
    const Token& t = u.tok[tok_index];
    Finding f;
    f.cell = u.cell;
    const std::uint32_t line = u.line(tok_index);
    f.line = static_cast<int>(line);
    f.col = static_cast<int>(u.src->column_of(line, t.begin));
    const std::uint32_t end_line = t.end > t.begin ? u.src->line_of(t.end - 1) : line;
    f.end_line = static_cast<int>(end_line);
    f.end_col = static_cast<int>(u.src->column_of(end_line, t.end));
    f.code = std::string(code);
    f.message = std::move(message);
    f.confidence = conf;
    findings_.push_back(std::move(f));
    weak_.push_back(weak ? 1 : 0);
    sources_.emplace_back();
    return findings_.back();
  }

  void add_rename(const Unit& u, int tok_index, const Rename& r, std::string message, bool with_edit) {
    Finding& f = add(u, tok_index, r.code, std::move(message), Confidence::high);
    if (with_edit && text(u, tok_index) == r.old_name)
      f.fix = Edit{u.tok[tok_index].begin, u.tok[tok_index].end, std::string(r.new_name)};
  }

  static std::string rename_text(const Rename& r) {
    return fmt::format("{} is renamed {} in PyTorch 2.13", r.qualified, r.new_name);
  }

  // ---- pass 1: bindings
  void collect_bindings(const Unit& u) {
    const int n = u.n;
    int indent = 0, depth = 0;
    bool stmt_start = true;
    std::vector<int> parts;
    for (int i = 0; i < n; ++i) {
      const Token& t = u.tok[i];
      if (t.kind == TokKind::newline) { stmt_start = true; depth = 0; continue; }
      if (t.kind == TokKind::indent) { ++indent; stmt_start = true; continue; }
      if (t.kind == TokKind::dedent) { --indent; stmt_start = true; continue; }
      if (t.kind == TokKind::op) {
        if (t.end - t.begin != 1) continue;
        const char o = u.byte(i, 0);
        if (o == '(' || o == '[' || o == '{') ++depth;
        else if (o == ')' || o == ']' || o == '}') depth = std::max(0, depth - 1);
        else if (depth == 0 && (o == ';' || o == ':')) stmt_start = true;
        continue;
      }
      if (!stmt_start) continue;
      stmt_start = false;
      if (t.kind != TokKind::name) continue;
      const std::string_view w = text(u, i);
      if (w == "import") {
        i = parse_import(u, i + 1) - 1;
      } else if (w == "from") {
        i = parse_from(u, i + 1) - 1;
      } else if ((w == "def" || w == "class" || (w == "async" && is_word(u, i + 1, "def")))) {
        const int name_i = w == "async" ? i + 2 : i + 1;
        if (indent == 0 && !ctx_.module.empty() && is_name(u, name_i))
          bind(text(u, name_i), fmt::format("{}.{}", ctx_.module, text(u, name_i)), false, false,
               static_cast<int>(u.line(name_i)), true);
      } else if (is_op(u, i + 1, "=")) {
        // `name = dotted` (alias) or `name = torch.fn(...)` (a tensor).
        const int after = read_dotted(u, i + 2, parts);
        if (parts.empty()) continue;
        const std::string q = resolve(u, parts);
        if (q.empty()) continue;
        if (ends_statement(u, after) && starts_with(q, "torch")) {
          bind(w, q, true, false, static_cast<int>(u.line(i)), false, true);
        } else if (is_op(u, after, "(") && returns_tensor(q)) {
          tensor_names_.insert(std::string(w));
        } else if (is_op(u, after, "(") && !starts_with(q, "torch") && !lookup(text(u, parts[0]))->local_def) {
          value_sources_.try_emplace(std::string(w), q);  // `arr = np.zeros(3)`: arr comes from numpy
        }
      }
    }
  }

  static bool is_tensor_class(std::string_view q) {
    return q == "torch.Tensor" || q == "torch._tensor.Tensor" || q == "torch.nn.Parameter" ||
           q == "torch.nn.parameter.Parameter";
  }

  static bool returns_tensor(std::string_view q) {
    if (!starts_with(q, "torch.")) return false;
    const std::string_view rest = q.substr(6);
    if (rest.find('.') == std::string_view::npos) return rest != "device" && rest != "dtype" && rest != "Size" &&
                                                         rest != "Generator" && rest != "finfo" && rest != "iinfo";
    return starts_with(rest, "nn.functional.") || starts_with(rest, "linalg.") || starts_with(rest, "fft.") ||
           starts_with(rest, "special.");
  }

  int parse_import(const Unit& u, int i) {
    std::vector<int> parts;
    while (true) {
      i = read_dotted(u, i, parts);
      if (parts.empty()) return i;
      const std::string dotted = join(u, parts);
      imports_.push_back(dotted);
      if (is_word(u, i, "as") && is_name(u, i + 1)) {
        bind(text(u, i + 1), dotted, true, false, static_cast<int>(u.line(i)));
        i += 2;
      } else {
        bind(text(u, parts[0]), std::string(text(u, parts[0])), false, false, static_cast<int>(u.line(i - 1)));
      }
      if (!is_op(u, i, ",")) return i;
      ++i;
    }
  }

  int parse_from(const Unit& u, int i) {
    int dots = 0;
    while (is_op(u, i, ".") || is_op(u, i, "...")) dots += static_cast<int>(text(u, i++).size());
    std::vector<int> parts;
    if (!is_word(u, i, "import")) i = read_dotted(u, i, parts);  // `from . import x` has no module part
    std::string base = join(u, parts);
    if (dots > 0) {
      const std::string resolved = resolve_relative(dots, base);
      base = resolved.empty() ? fmt::format("{}{}", std::string(static_cast<std::size_t>(dots), '.'), base)
                              : resolved;
    }
    if (!is_word(u, i, "import")) return i;
    ++i;
    const bool absolute = !base.empty() && base[0] != '.';
    if (absolute) imports_.push_back(base);
    if (is_op(u, i, "*")) {
      if (!base.empty() && base[0] != '.') star_modules_.push_back(base);
      return i + 1;
    }
    const bool paren = is_op(u, i, "(");
    if (paren) ++i;
    while (is_name(u, i)) {
      const int name_i = i;
      const std::string q = fmt::format("{}.{}", base, text(u, i));
      if (absolute) imports_.push_back(q);  // the name may be a submodule
      ++i;
      int local = name_i;
      if (is_word(u, i, "as") && is_name(u, i + 1)) {
        local = i + 1;
        i += 2;
      }
      bind(text(u, local), q, local != name_i, true, static_cast<int>(u.line(name_i)));
      if (const Rename* r = find_rename(q)) {
        import_fixes_.push_back({&u, name_i, r, local != name_i ? std::string(text(u, local)) : std::string()});
      }
      if (!is_op(u, i, ",")) break;
      ++i;
    }
    if (paren && is_op(u, i, ")")) ++i;
    return i;
  }

  // `name: torch.Tensor` in parameters and annotated assignments.
  void collect_tensor_annotations(const Unit& u) {
    const int n = u.n;
    std::vector<int> parts;
    for (int i = 0; i + 2 < n; ++i) {
      if (u.tok[i].kind != TokKind::name || !is_op(u, i + 1, ":") || !is_name(u, i + 2)) continue;
      read_dotted(u, i + 2, parts);
      const std::string q = resolve(u, parts);
      if (is_tensor_class(q)) tensor_names_.insert(std::string(text(u, i)));
    }
  }

  // ---- pass 2: findings
  void check_unit(const Unit& u) {
    if (!u.field) {
      // Import statements were parsed in pass 1; their findings are reported here in token order.
      for (const auto& f : import_fixes_) {
        if (f.unit != &u) continue;
        std::string msg = rename_text(*f.rename);
        if (!f.alias.empty()) msg += fmt::format(" (imported as '{}'; --fix renames the import, the alias stays)", f.alias);
        add_rename(u, f.tok, *f.rename, std::move(msg), true);
      }
    }
    const int n = u.n;
    int import_until = -1;  // tokens of the current import statement are not references
    for (int i = 0; i < n; ++i) {
      const Token& t = u.tok[i];
      if (t.kind == TokKind::name) {
        const std::string_view w = text(u, i);
        if (i <= import_until) continue;
        if ((w == "import" || w == "from") && statement_start(u, i)) {
          int j = i;
          while (!ends_statement(u, j)) ++j;
          import_until = j;
          continue;
        }
        if (i > 0 && is_op(u, i - 1, ".")) {
          check_attribute(u, i);
          continue;
        }
        if (is_python_keyword(w)) continue;
        if (i > 0 && (is_word(u, i - 1, "def") || is_word(u, i - 1, "class"))) {
          check_definition(u, i);
          continue;
        }
        if (is_op(u, i + 1, "=") && (is_op(u, i - 1, "(") || is_op(u, i - 1, ","))) continue;  // keyword arg
        if (is_op(u, i + 1, "=") && statement_start(u, i)) continue;  // an assignment target, not a use
        check_chain(u, i);
      } else if (t.kind == TokKind::op && t.end - t.begin == 1 && u.byte(i, 0) == '(' && i > 0 &&
                 i > import_until) {
        check_call(u, i);
      }
    }
  }

  // A top-level def of a target name in the module that defines it (scanning torch itself).
  void check_definition(const Unit& u, int i) {
    const Binding* b = lookup(text(u, i));
    if (!b || b->from_import || b->aliased) return;
    if (const Rename* r = find_rename(b->qualified)) {
      if (b->line != static_cast<int>(u.line(i))) return;  // a nested def of the same name
      add_rename(u, i, *r, fmt::format("defines {}, renamed {} in PyTorch 2.13", r->qualified, r->new_name), true);
    }
  }

  void check_chain(const Unit& u, int i) {
    const std::string_view head = text(u, i);
    const Binding* b = lookup(head);
    if (!b && (star_modules_.empty() || !is_target_leaf(head))) return;
    if (b && b->local_def && !find_rename(b->qualified)) return;
    if (b && !starts_with(b->qualified, "torch")) return;
    std::vector<int>& parts = chain_parts_;  // member scratch: no allocation per call
    parts.clear();
    read_dotted(u, i, parts);
    std::string q;
    bool head_aliased = false;
    if (b) {
      q = b->qualified;
      head_aliased = b->aliased;
    } else if (!star_modules_.empty() && is_target_leaf(head)) {
      for (const auto& s : star_modules_) {
        const std::string cand = fmt::format("{}.{}", s, head);
        if (find_rename(cand) || cand == kAlignTensors) q = cand;
      }
    }
    if (q.empty()) return;
    // Head bound straight to a target.
    if (const Rename* r = is_target_leaf(q.substr(q.rfind('.') + 1)) ? find_rename(q) : nullptr) {
      // A variable that only holds the renamed function (`fn = dist.all_gather_into_tensor`): its
      // assignment is the finding to fix, and its uses stay valid once that is renamed.
      if (head_aliased && b->assigned) return;
      if (head_aliased) {
        add_rename(u, parts[0], *r,
                   fmt::format("'{}' is {}, renamed {} in PyTorch 2.13 (--fix renames it where it is {} on line {})",
                               head, r->qualified, r->new_name, b->assigned ? "assigned" : "imported", b->line),
                   false);
      } else {
        add_rename(u, parts[0], *r, rename_text(*r), true);
      }
      return;
    }
    if (q == kAlignTensors) {
      add(u, parts[0], "UPG208", "torch.align_tensors is removed with named tensors in PyTorch 2.13", Confidence::high);
      return;
    }
    if (!starts_with(q, "torch")) return;
    for (std::size_t k = 1; k < parts.size(); ++k) {
      const std::string_view leaf = text(u, parts[k]);
      if (!is_target_leaf(leaf)) continue;
      std::string qk = q;
      for (std::size_t m = 1; m <= k; ++m) {
        qk += '.';
        qk += text(u, parts[m]);
      }
      if (const Rename* r = find_rename(qk)) {
        add_rename(u, parts[k], *r, rename_text(*r), true);
        return;
      }
      if (qk == kAlignTensors) {
        add(u, parts[k], "UPG208", "torch.align_tensors is removed with named tensors in PyTorch 2.13",
            Confidence::high);
        return;
      }
    }
  }

  // What the expression before the '.' at `dot` is. For an unknown receiver, `source` is set to the
  // qualified name of the non-torch function its value comes from (a call of it, or a name assigned
  // from one), or left empty when that is not known.
  Receiver classify_receiver(const Unit& u, int dot, std::string* source = nullptr) const {
    if (source) source->clear();
    const int r = dot - 1;
    if (r < 0) return Receiver::unknown;
    const Token& t = u.tok[r];
    if (t.kind == TokKind::string || t.kind == TokKind::number) return Receiver::not_tensor;
    if (t.kind == TokKind::name) {
      int h = r;
      while (h >= 2 && is_op(u, h - 1, ".") && is_name(u, h - 2)) h -= 2;
      if (h >= 1 && is_op(u, h - 1, ".")) return Receiver::unknown;  // f().a.b
      std::vector<int>& parts = receiver_parts_;  // member scratch: no allocation per call
      parts.clear();
      for (int k = h; k <= r; k += 2) parts.push_back(k);
      const std::string_view head = text(u, h);
      if (const Binding* b = lookup(head)) {
        std::string q = b->qualified;
        for (std::size_t k = 1; k < parts.size(); ++k) q += fmt::format(".{}", text(u, parts[k]));
        if (is_tensor_class(q)) return Receiver::tensor_class;
        if (b->local_def) return Receiver::unknown;
        // A name bound to a module or imported object (or alias of one): not a tensor instance.
        return Receiver::not_tensor;
      }
      if (parts.size() == 1 && tensor_names_.count(head)) return Receiver::tensor;
      if (source) {
        auto it = value_sources_.find(head);
        if (it != value_sources_.end() && !tensor_names_.count(head)) *source = it->second;
      }
      return Receiver::unknown;
    }
    if (is_op(u, r, ")")) {
      const int open = u.match(r);
      if (open > 0 && is_name(u, open - 1)) {
        int h = open - 1;
        while (h >= 2 && is_op(u, h - 1, ".") && is_name(u, h - 2)) h -= 2;
        if (h >= 1 && is_op(u, h - 1, ".")) return Receiver::unknown;
        std::vector<int>& parts = receiver_parts_;  // member scratch: no allocation per call
        parts.clear();
        for (int k = h; k <= open - 1; k += 2) parts.push_back(k);
        std::string q = resolve(u, parts);
        if (returns_tensor(q)) return Receiver::tensor;
        if (source && !q.empty() && !starts_with(q, "torch") && !lookup(text(u, parts[0]))->local_def)
          *source = std::move(q);  // a function of this file: the file's own evidence
      }
    }
    return Receiver::unknown;
  }

  std::vector<Arg> parse_args(const Unit& u, int open) const {
    std::vector<Arg> args;
    const int close = u.match(open);
    if (close < 0) return args;
    int i = open + 1;
    while (i < close) {
      Arg a;
      a.begin = i;
      if (is_op(u, i, "*") || is_op(u, i, "**")) a.star = true;
      if (is_name(u, i) && is_op(u, i + 1, "=")) {
        a.kw = i;
        a.value = i + 2;
      } else {
        a.value = i;
      }
      while (i < close && !is_op(u, i, ",")) {
        if (u.match(i) > i) i = u.match(i);
        ++i;
      }
      a.end = i;
      if (a.end > a.begin) args.push_back(a);
      ++i;  // the comma
    }
    return args;
  }

  bool all_strings(const Unit& u, int b, int e) const {
    if (b >= e) return false;
    for (int k = b; k < e; ++k)
      if (u.tok[k].kind != TokKind::string) return false;
    return true;
  }
  // "a" | ("a", "b") | ["a", "b"]
  bool string_or_strings(const Unit& u, int b, int e) const {
    if (all_strings(u, b, e)) return true;
    if (e - b >= 3 && (is_op(u, b, "(") || is_op(u, b, "[")) && u.match(b) == e - 1) {
      bool any = false;
      for (int k = b + 1; k < e - 1; ++k) {
        if (is_op(u, k, ",")) continue;
        if (u.tok[k].kind != TokKind::string) return false;
        any = true;
      }
      return any;
    }
    return false;
  }
  bool is_none_or_ellipsis(const Unit& u, const Arg& a) const {
    return a.end - a.value == 1 && (is_word(u, a.value, "None") || is_op(u, a.value, "..."));
  }

  static std::string confidence_note(Confidence c, Receiver r) {
    if (r == Receiver::tensor || r == Receiver::tensor_class) return " (confidence: high; the receiver is a tensor)";
    if (c == Confidence::high) return " (confidence: high)";
    return fmt::format(" (confidence: {}; the receiver is not known to be a tensor)", confidence_name(c));
  }

  // A named-tensor finding. On a receiver known to be a tensor its note is final; otherwise it rests
  // on the file's imports and gets its note when that is settled (settle_torch_evidence).
  // `source`: see classify_receiver.
  void add_named(const Unit& u, int tok, std::string_view code, std::string message, Confidence c, Receiver recv,
                 const std::string& source) {
    if (recv == Receiver::tensor || recv == Receiver::tensor_class) {
      add(u, tok, code, message + confidence_note(c, recv), c);
    } else {
      add(u, tok, code, std::move(message), c, /*weak=*/true);
      sources_.back() = source;
    }
  }

  void check_attribute(const Unit& u, int i) {
    const std::string_view a = text(u, i);
    // Cheap first filter (by length) on the handful of attributes the UPG2xx rules look at.
    switch (a.size()) {
      case 5: if (a != "names") return; break;
      case 6: if (a != "rename") return; break;
      case 7: if (a != "rename_") return; break;
      case 8: if (a != "align_to" && a != "align_as") return; break;
      case 9: if (a != "has_names" && a != "unflatten") return; break;
      case 12: if (a != "refine_names") return; break;
      default: return;
    }
    std::string& source = source_scratch_;
    const Receiver recv = classify_receiver(u, i - 1, &source);
    if (recv == Receiver::not_tensor) return;
    const bool known = recv == Receiver::tensor || recv == Receiver::tensor_class;
    const bool call = is_op(u, i + 1, "(");
    if (a == "names") {
      if (call) return;
      const Confidence c = known ? Confidence::high : Confidence::medium;
      add_named(u, i, "UPG201", "Tensor.names is removed with named tensors in PyTorch 2.13", c, recv, source);
      return;
    }
    if (!call && recv != Receiver::tensor_class) return;
    const std::vector<Arg> args = call ? parse_args(u, i + 1) : std::vector<Arg>{};
    if (a == "refine_names" || a == "has_names") {
      add_named(u, i, a == "refine_names" ? "UPG202" : "UPG206",
                fmt::format("Tensor.{}() is removed with named tensors in PyTorch 2.13", a), Confidence::high, recv, source);
    } else if (a == "align_to" || a == "align_as") {
      const Confidence c = known ? Confidence::high : Confidence::medium;
      add_named(u, i, a == "align_to" ? "UPG204" : "UPG205",
                fmt::format("Tensor.{}() is removed with named tensors in PyTorch 2.13; use permute", a), c, recv, source);
    } else if (a == "rename" || a == "rename_") {
      int positional = 0, strings = 0, kw_strings = 0, kws = 0;
      bool none = false, other = false;
      for (const Arg& g : args) {
        if (g.star) { other = true; continue; }
        if (g.kw >= 0) {
          ++kws;
          if (all_strings(u, g.value, g.end) || is_none_or_ellipsis(u, g)) ++kw_strings;
          continue;
        }
        ++positional;
        if (is_none_or_ellipsis(u, g)) none = true;
        else if (all_strings(u, g.value, g.end)) ++strings;
        else other = true;
      }
      const bool names_like = !other && kws == kw_strings && (positional + kws) > 0;
      std::optional<Confidence> c;
      if (!call) c = Confidence::high;  // torch.Tensor.rename as a value
      else if (known) c = Confidence::high;
      else if (a == "rename_") c = names_like || none ? Confidence::high : Confidence::medium;
      else if (names_like && none) c = Confidence::high;
      else if (names_like && (strings >= 2 || (positional == 0 && kws > 0) || none)) c = Confidence::medium;
      if (!c) return;
      add_named(u, i, "UPG203",
                fmt::format("Tensor.{}() with dimension names is removed with named tensors in PyTorch 2.13", a), *c,
                recv, source);
    } else if (a == "unflatten") {
      std::vector<const Arg*> pos;
      for (const Arg& g : args)
        if (g.kw < 0 && !g.star) pos.push_back(&g);
      const Arg* dim = nullptr;
      const Arg* sizes = nullptr;
      for (const Arg& g : args) {
        if (g.kw >= 0 && text(u, g.kw) == "dim") dim = &g;
        if (g.kw >= 0 && (text(u, g.kw) == "sizes" || text(u, g.kw) == "unflattened_size")) sizes = &g;
      }
      if (!dim && !pos.empty()) dim = pos[0];
      if (!sizes && pos.size() >= 2) sizes = pos[1];
      bool named = dim && all_strings(u, dim->value, dim->end);
      if (!named && sizes) named = named_shape(u, sizes->value, sizes->end);
      if (!named) return;  // unflatten itself stays; only named shapes are removed
      add_named(u, i, "UPG209",
                "Tensor.unflatten() with named shapes is removed with named tensors in PyTorch 2.13; pass a dim index "
                "and plain sizes",
                Confidence::high, recv, source);
    }
  }

  // (("C1", 2), ("C2", 4)) or [["C1", 2], ...]
  bool named_shape(const Unit& u, int b, int e) const {
    if (e - b < 3 || !(is_op(u, b, "(") || is_op(u, b, "[")) || u.match(b) != e - 1) return false;
    const int inner = b + 1;
    return (is_op(u, inner, "(") || is_op(u, inner, "[")) && inner + 1 < e && u.tok[inner + 1].kind == TokKind::string;
  }

  // Cheap test, with no allocation, of whether any call rule could fire: a `names=` keyword or a
  // keyword of the dimension table, or an argument that starts with a string, or with a bracket
  // holding a string (a tuple of names, a named shape).
  bool call_might_match(const Unit& u, int open) const {
    const int close = u.match(open);
    if (close < 0) return false;
    bool arg_start = true;
    for (int i = open + 1; i < close; ++i) {
      const Token& t = u.tok[i];
      if (arg_start) {
        if (t.kind == TokKind::string) return true;
        if (t.kind == TokKind::op && t.end - t.begin == 1 && (u.byte(i, 0) == '(' || u.byte(i, 0) == '[') && i + 1 < close) {
          const Token& n = u.tok[i + 1];
          if (n.kind == TokKind::string) return true;
          if (n.kind == TokKind::op && n.end - n.begin == 1 && (u.byte(i + 1, 0) == '(' || u.byte(i + 1, 0) == '[') && i + 2 < close &&
              u.tok[i + 2].kind == TokKind::string)
            return true;
        }
      }
      arg_start = false;
      if (t.kind == TokKind::name && is_op(u, i + 1, "=")) {
        const std::string_view w = text(u, i);
        if (w == "names" || is_dim_keyword(w)) return true;
      }
      if (t.kind == TokKind::op) {
        if (u.match(i) > i) {
          i = u.match(i);
        } else if (t.end - t.begin == 1 && u.byte(i, 0) == ',') {
          arg_start = true;
        }
      }
    }
    return false;
  }

  // A value PyTorch takes as a dimension name for a parameter of this kind: an identifier string
  // (Dimname), or for Sequence[Dimname] also a tuple/list of them.
  bool dim_name_value(const Unit& u, int b, int e, DimKind kind) const {
    if (e - b == 1) return u.tok[b].kind == TokKind::string && is_dim_name_literal(text(u, b));
    if (kind != DimKind::names || e - b < 3 || !(is_op(u, b, "(") || is_op(u, b, "[")) || u.match(b) != e - 1)
      return false;
    bool any = false;
    for (int k = b + 1; k < e - 1; ++k) {
      if (is_op(u, k, ",")) continue;
      if (u.tok[k].kind != TokKind::string || !is_dim_name_literal(text(u, k))) return false;
      any = true;
    }
    return any;
  }

  // Binds a call's arguments to one overload the way Python would (positions, keywords, required
  // parameters; `*args`/`**kwargs` relax what cannot be known) and returns the first argument that
  // passes a dimension name to a dimension parameter, or nullptr (also when the call cannot bind).
  // `subject`: the name of a first parameter that holds the tensor (the function form's `input` or
  // `tensors`, `self` for torch.Tensor.op(t, ...)), "" for a method call.
  const Arg* bind_dim_args(const Unit& u, const std::vector<Arg>& args, const DimOverload& o,
                           std::string_view subject) const {
    constexpr int kMaxParams = 16;
    const Arg* bound[kMaxParams] = {};
    const int np = static_cast<int>(std::min<std::size_t>(o.params.size(), kMaxParams));
    bool star = false, dstar = false, have_subject = subject.empty();
    int next_pos = 0;  // index of the next positional parameter
    for (const Arg& g : args) {
      if (g.star) {
        if (is_op(u, g.begin, "**")) dstar = true;
        else star = true;
        continue;
      }
      if (g.kw < 0) {
        if (star) continue;  // its position is unknown after *args
        if (!have_subject) {
          have_subject = true;
          continue;
        }
        while (next_pos < np && o.params[next_pos].keyword_only) ++next_pos;
        if (next_pos >= np) return nullptr;  // too many positional arguments
        bound[next_pos++] = &g;
        continue;
      }
      const std::string_view k = text(u, g.kw);
      if (k == subject && !have_subject) {
        have_subject = true;
        continue;
      }
      if (subject == o.subject && k == "out") continue;
      int p = 0;
      while (p < np && o.params[p].name != k) ++p;
      if (p == np || bound[p]) {
        if (dstar && p == np) continue;
        return nullptr;  // no such parameter, or given twice
      }
      bound[p] = &g;
    }
    if (!have_subject && !star && !dstar) return nullptr;
    if (!star && !dstar)
      for (int p = 0; p < np; ++p)
        if (!bound[p] && !o.params[p].has_default) return nullptr;  // a required parameter is missing
    const Arg* first = nullptr;
    for (int p = 0; p < np; ++p) {
      const Arg* g = bound[p];
      if (!g || o.params[p].kind == DimKind::other || !dim_name_value(u, g->value, g->end, o.params[p].kind)) continue;
      if (!first || g->value < first->value) first = g;
    }
    return first;
  }

  enum class Form { method, function, unbound_method };  // t.op(...), torch.op(t, ...), torch.Tensor.op(t, ...)

  // The first argument of the call that passes a dimension name to `op` under some overload.
  const Arg* dim_name_arg(const Unit& u, const std::vector<Arg>& args, std::string_view op, Form form) const {
    const Arg* first = nullptr;
    for (const DimOverload& o : dim_overloads(op)) {
      if (form == Form::function ? !o.torch_function : !o.tensor_method) continue;
      const std::string_view subject = form == Form::function ? o.subject : form == Form::unbound_method ? "self" : "";
      const Arg* g = bind_dim_args(u, args, o, subject);
      if (g && (!first || g->value < first->value)) first = g;
    }
    return first;
  }

  // Only the keywords: a torch callee outside the table's forms (torch.nn.functional.softmax) whose
  // keyword is a dimension parameter of the op of the same name.
  const Arg* dim_name_keyword(const Unit& u, const std::vector<Arg>& args, std::string_view op) const {
    for (const Arg& g : args) {
      if (g.kw < 0) continue;
      const std::string_view k = text(u, g.kw);
      for (const DimOverload& o : dim_overloads(op))
        for (const DimParam& p : o.params)
          if (p.kind != DimKind::other && p.name == k && dim_name_value(u, g.value, g.end, p.kind)) return &g;
    }
    return nullptr;
  }

  void check_call(const Unit& u, int open) {
    if (!call_might_match(u, open)) return;
    const int prev = open - 1;
    std::vector<int>& parts = call_parts_;  // member scratch: no allocation per call
    parts.clear();
    std::string_view method;
    Receiver recv = Receiver::unknown;
    std::string q;
    call_source_.clear();
    if (!is_name(u, prev)) return;
    const std::string_view pw = text(u, prev);
    if (is_python_keyword(pw) && pw != "None") return;
    // dict(dim="...") builds a mapping; its keywords are keys, not arguments.
    if (pw == "dict" && (prev == 0 || !is_op(u, prev - 1, ".")) && !lookup(pw)) return;
    int h = prev;
    while (h >= 2 && is_op(u, h - 1, ".") && is_name(u, h - 2)) h -= 2;
    if (h >= 1 && (is_word(u, h - 1, "def") || is_word(u, h - 1, "class"))) return;
    for (int k = h; k <= prev; k += 2) parts.push_back(k);
    const bool chained_after_call = h >= 1 && is_op(u, h - 1, ".");
    if (!chained_after_call) {
      const Binding* hb = lookup(text(u, h));
      if (hb && hb->local_def) q.clear();
      else q = resolve(u, parts);
    }
    if (parts.size() >= 2 || chained_after_call) {
      method = pw;
      recv = classify_receiver(u, prev - 1, &call_source_);
    }
    if (!q.empty() && !starts_with(q, "torch")) return;  // a call into another imported module
    if (method == "rename" || method == "rename_" || method == "unflatten" || method == "refine_names" ||
        method == "align_to")
      return;  // handled as attributes
    const bool is_torch = starts_with(q, "torch.");
    const bool known = recv == Receiver::tensor || is_torch;
    if (!is_torch && recv == Receiver::not_tensor) return;
    const std::vector<Arg> args = parse_args(u, open);
    for (const Arg& g : args) {
      if (g.star || g.kw < 0 || text(u, g.kw) != "names") continue;
      if (is_torch && std::count(q.begin(), q.end(), '.') == 1 && is_torch_factory(q.substr(6))) {
        add(u, g.kw, "UPG207",
            fmt::format("{}(names=...) is removed with named tensors in PyTorch 2.13; drop the argument", q) +
                confidence_note(Confidence::high, Receiver::unknown),
            Confidence::high);
      }
    }
    std::vector<const Arg*> pos;
    for (const Arg& g : args)
      if (g.kw < 0 && !g.star) pos.push_back(&g);
    if ((q == "torch.nn.Unflatten" || q == "torch.nn.modules.flatten.Unflatten") && !pos.empty() &&
        (all_strings(u, pos[0]->value, pos[0]->end) ||
         (pos.size() >= 2 && named_shape(u, pos[1]->value, pos[1]->end)))) {
      add(u, pos[0]->value, "UPG209",
          "nn.Unflatten with named shapes is removed with named tensors in PyTorch 2.13; pass a dim index and plain "
          "sizes (confidence: high)",
          Confidence::high);
      return;
    }

    // UPG210: bind the arguments to the op's signatures (dim_params.h).
    const Arg* dim = nullptr;
    std::string_view callee;  // as named in the message
    if (is_torch) {
      const std::string_view leaf = std::string_view(q).substr(q.rfind('.') + 1);
      const std::string_view owner = std::string_view(q).substr(0, q.rfind('.'));
      if (owner == "torch") dim = dim_name_arg(u, args, leaf, Form::function);
      else if (is_tensor_class(owner)) dim = dim_name_arg(u, args, leaf, Form::unbound_method);
      else dim = dim_name_keyword(u, args, leaf);
      callee = q;
    } else if (!method.empty()) {
      dim = dim_name_arg(u, args, method, Form::method);
      callee = method;
    }
    if (!dim) return;
    std::string message =
        dim->kw >= 0
            ? fmt::format("a dimension name passed as {}= is no longer accepted in PyTorch 2.13 (named tensors are "
                          "removed); pass the dimension's index",
                          text(u, dim->kw))
            : fmt::format("a dimension name passed to {}() is no longer accepted in PyTorch 2.13 (named tensors are "
                          "removed); pass the dimension's index",
                          callee);
    if (is_torch) {
      add(u, dim->value, "UPG210", message + confidence_note(Confidence::high, Receiver::unknown), Confidence::high);
    } else {
      add_named(u, dim->value, "UPG210", std::move(message), known ? Confidence::high : Confidence::medium, recv,
                call_source_);
    }
  }

  struct ImportFix {
    const Unit* unit;
    int tok;
    const Rename* rename;
    std::string alias;
  };

  const PythonContext& ctx_;
  BindingMap bindings_;
  std::array<std::uint64_t, kBloomBits / 64> bloom_{};
  NameSet tensor_names_;
  std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> value_sources_;  // name -> callee
  std::vector<std::string> star_modules_;
  std::vector<ImportFix> import_fixes_;
  std::vector<Finding> findings_;
  std::vector<std::uint8_t> weak_;     // per finding: rests on the file's imports (see add)
  std::vector<std::string> sources_;   // per finding: where its receiver's value comes from, if known
  std::vector<std::string> imports_;   // modules imported, absolute
  // Scratch token-index lists, kept to save an allocation per resolved chain.
  std::vector<int> chain_parts_, call_parts_;
  std::string source_scratch_, call_source_;
  mutable std::vector<int> receiver_parts_;
};

}  // namespace

PythonCheck check_python(const std::vector<std::string_view>& sources, bool cells, const PythonContext& ctx) {
  return Checker(ctx).run(sources, cells);
}

void settle_torch_evidence(PythonCheck& check, bool file_evidence, const ModuleImportsTorch& modules) {
  for (std::size_t k = 0; k < check.findings.size() && k < check.needs_torch.size(); ++k) {
    if (!check.needs_torch[k]) continue;
    Finding& f = check.findings[k];
    const std::string_view source = k < check.value_sources.size() ? check.value_sources[k] : std::string_view();
    bool evidence = file_evidence;
    if (!source.empty()) {
      evidence = false;
      std::string_view m = source;
      while (modules && !m.empty()) {
        if (const auto found = modules(m)) {
          evidence = *found;
          break;
        }
        const std::size_t dot = m.rfind('.');
        m = dot == std::string_view::npos ? std::string_view() : m.substr(0, dot);
      }
    }
    if (evidence) {
      f.message += f.confidence == Confidence::high
                       ? std::string(" (confidence: high)")
                       : fmt::format(" (confidence: {}; the receiver is not known to be a tensor)",
                                     confidence_name(f.confidence));
    } else if (!source.empty()) {
      f.confidence = Confidence::low;
      f.message += fmt::format(" (confidence: low; the receiver comes from {}(), and its module does not import torch)",
                               source);
    } else {
      f.confidence = Confidence::low;
      f.message +=
          " (confidence: low; the receiver is not known to be a tensor, and neither this file nor a module it "
          "imports imports torch)";
    }
  }
  check.needs_torch.clear();
  check.value_sources.clear();
}

std::vector<Finding> check_python_source(std::string_view source, const PythonContext& ctx) {
  PythonCheck c = check_python({source}, false, ctx);
  settle_torch_evidence(c, c.imports_torch, nullptr);
  return std::move(c.findings);
}

std::vector<Finding> check_python_cells(const std::vector<std::string>& cells, const PythonContext& ctx) {
  std::vector<std::string_view> views(cells.begin(), cells.end());
  PythonCheck c = check_python(views, true, ctx);
  settle_torch_evidence(c, c.imports_torch, nullptr);
  return std::move(c.findings);
}

}  // namespace lmcore::upgrade
