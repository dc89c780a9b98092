// A conservative byte-level test of whether a Python source can give any UPG1xx/UPG2xx finding, so
// that scan() tokenizes only the files that can. See may_have_python_findings in python_check.h.
//
// Every finding of python_check.cpp starts from one of these, and each leaves a mark in the bytes:
//   * a renamed collective or torch.align_tensors (UPG1xx, UPG208): the name itself, wherever it is
//     imported, aliased, defined or used;
//   * a named-tensor attribute or keyword (UPG201..UPG209): names, rename, rename_, align_to,
//     align_as, has_names, refine_names, unflatten, Unflatten;
//   * a dimension name passed by keyword (UPG210): a keyword of the dimension table (dim, dim0, ...,
//     out_dim) followed by `=` and a value that can be a string or a tuple of strings;
//   * a dimension name passed by position (UPG210): an op of the dimension table called with a quote
//     inside its parentheses, or an op that may be bound to another name (`from torch import sum as
//     s`, `s = torch.sum`).
// Comments and string literals are skipped (an f-string's body is searched as code, since its
// replacement fields are), with the same quote and escape rules as the tokenizer; where a literal
// is malformed the scan errs towards a candidate or stops at the line end. The test may pass a
// file with no finding, never the reverse.
#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "lmcore/upgrade/dim_params.h"
#include "lmcore/upgrade/python_check.h"

namespace lmcore::upgrade {

namespace {

enum class Trigger : std::uint8_t { none, word, attribute, keyword, op };

// The trigger words in an open-addressed table keyed by length and the first, second and last
// bytes: most identifiers of a file miss on the first probe without comparing any bytes.
class Words {
 public:
  Words() {
    // Named-tensor methods count only as attributes (check_attribute); `names` also as a keyword.
    for (std::string_view s : {"rename", "rename_", "align_to", "align_as", "has_names", "refine_names", "unflatten"})
      add(s, Trigger::attribute);
    add("names", Trigger::keyword);
    // Reached through imports and aliases: anywhere.
    for (std::string_view s :
         {"Unflatten", "align_tensors", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather_tensor",
          "all_gather_tensor_autograd", "reduce_scatter_tensor_autograd", "all_gather_into_tensor_coalesced",
          "reduce_scatter_tensor_coalesced"})
      add(s, Trigger::word);
    for (const auto& o : all_dim_overloads()) {
      add(o.op, Trigger::op);
      for (const auto& p : o.params)
        if (p.kind != DimKind::other) add(p.name, Trigger::keyword);
    }
  }

  // False for most identifiers: no trigger word has this first byte and length.
  bool may_be(const char* w, std::size_t len) const {
    return len < 64 && (maybe_[static_cast<unsigned char>(w[0])] >> len & 1);
  }

  Trigger find(const char* w, std::size_t len) const {
    // Bit L of maybe_[c]: some trigger word has length L and starts with c. Rejects most
    // identifiers with one load and a shift.
    if (len >= 64 || !(maybe_[static_cast<unsigned char>(w[0])] >> len & 1)) return Trigger::none;
    for (std::size_t k = slot(w, len);; k = (k + 1) & (kSlots - 1)) {
      const Entry& e = table_[k];
      if (e.len == 0) return Trigger::none;
      if (e.len == len && std::memcmp(e.word, w, len) == 0) return e.trigger;
    }
  }

 private:
  static constexpr std::size_t kSlots = 512;
  struct Entry {
    const char* word = nullptr;
    std::size_t len = 0;
    Trigger trigger = Trigger::none;
  };
  static std::size_t slot(const char* w, std::size_t len) {
    const auto u = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<unsigned char>(w[i])); };
    return (len * 0x9E37u + u(0) * 0x85EBu + u(1) * 0xC2B2u + u(len - 1) * 0x27D4u) >> 3 & (kSlots - 1);
  }
  void add(std::string_view w, Trigger t) {
    if (find(w.data(), w.size()) != Trigger::none) return;
    std::size_t k = slot(w.data(), w.size());
    while (table_[k].len != 0) k = (k + 1) & (kSlots - 1);
    table_[k] = {w.data(), w.size(), t};
    maybe_[static_cast<unsigned char>(w[0])] |= std::uint64_t{1} << w.size();
  }
  std::array<Entry, kSlots> table_{};
  std::array<std::uint64_t, 256> maybe_{};
};

const Words& words() {
  static const Words w;
  return w;
}

struct Classes {
  bool ident[256] = {}, start[256] = {};
  // What scan_code does at a byte: 0 nothing (operators, white space), 1 identifier, 2 number,
  // 3 comment, 4 string.
  unsigned char action[256] = {};
  constexpr Classes() {
    for (int c = 0; c < 256; ++c) {
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
      start[c] = alpha;
      ident[c] = alpha || (c >= '0' && c <= '9');
      action[c] = alpha ? 1 : (c >= '0' && c <= '9') ? 2 : c == '#' ? 3 : (c == '"' || c == '\'') ? 4 : 0;
    }
  }
};
constexpr Classes kClass;

// Skips spaces, tabs and backslash line continuations from p.
std::size_t skip_blank(std::string_view s, std::size_t p) {
  while (p < s.size()) {
    const char c = s[p];
    if (c == ' ' || c == '\t' || c == '\f') {
      ++p;
    } else if (c == '\\' && p + 1 < s.size() && (s[p + 1] == '\n' || s[p + 1] == '\r')) {
      p += 2;
    } else {
      break;
    }
  }
  return p;
}

// The byte before offset b, skipping white space and line continuations (0 at the start).
// When the way back crosses a line that holds a '#', the byte before may be hidden behind a comment
// (`f(a,  # note` / `dim='C')`): previous() then answers kUnknown, which callers take as a match.
constexpr char kUnknown = '\x01';
char previous(std::string_view s, std::size_t b) {
  while (b > 0 && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\f' || s[b - 1] == '\n' || s[b - 1] == '\r' ||
                   s[b - 1] == '\\')) {
    if (s[b - 1] == '\n') {
      std::size_t k = b - 1;
      while (k > 0 && s[k - 1] != '\n') {
        if (s[k - 1] == '#') return kUnknown;
        --k;
      }
    }
    --b;
  }
  return b > 0 ? s[b - 1] : '\0';
}

// At p, a value that may be a dimension name or names: a string (with any prefix), or a bracket
// whose first element is one, or a bracket of brackets (a named shape). White space and line ends
// before it are skipped; a comment there counts as a candidate.
bool string_like_value(std::string_view s, std::size_t p, int brackets = 2) {
  while (p < s.size() && (s[p] == ' ' || s[p] == '\t' || s[p] == '\f' || s[p] == '\n' || s[p] == '\r' || s[p] == '\\'))
    ++p;
  if (p >= s.size()) return false;
  const char c = s[p];
  if (c == '"' || c == '\'' || c == '#') return true;
  if ((c == '(' || c == '[') && brackets > 0) return string_like_value(s, p + 1, brackets - 1);
  for (std::size_t k = p; k < s.size() && k < p + 3; ++k) {  // a string prefix (r"", u'', ...)
    if (s[k] == '"' || s[k] == '\'') return true;
    if (!kClass.start[static_cast<unsigned char>(s[k])]) break;
  }
  return false;
}

// Skips white space, line ends and continuations from p (inside brackets a line end is white
// space). Returns the offset of the next byte, or npos when a comment comes first (its line may hide
// anything: callers take that as a match).
std::size_t skip_space_lines(std::string_view s, std::size_t p) {
  while (p < s.size() && (s[p] == ' ' || s[p] == '\t' || s[p] == '\f' || s[p] == '\n' || s[p] == '\r' || s[p] == '\\'))
    ++p;
  return p < s.size() && s[p] == '#' ? std::string_view::npos : p;
}

// `kw = <value>` as a call's keyword argument (after `(` or `,`), the value string-like unless
// `any_value` (names=None is a finding too).
bool keyword_trigger(std::string_view s, std::size_t word_begin, std::size_t p, bool any_value) {
  const char before = previous(s, word_begin);
  if (before != '(' && before != ',' && before != kUnknown) return false;
  p = skip_space_lines(s, p);  // `dim\n= 'C'` inside the call's parentheses
  if (p == std::string_view::npos) return true;
  if (p >= s.size() || s[p] != '=' || (p + 1 < s.size() && s[p + 1] == '=')) return false;
  return any_value || string_like_value(s, p + 1);
}

std::size_t skip_string(std::string_view s, std::size_t p, bool fstring, bool& hit);
std::size_t skip_fstring(std::string_view s, std::size_t p, bool& hit);
bool call_has_string_arg(std::string_view s, std::size_t p);
bool scan_code(std::string_view s, std::size_t b, std::size_t e);

// An op called with a quote inside its parentheses, imported under another name, or named at the
// end of a statement (`s = torch.sum`).
bool op_trigger(std::string_view s, std::size_t word_begin, std::size_t p) {
  p = skip_blank(s, p);
  if (p >= s.size() || s[p] == '\n' || s[p] == '\r' || s[p] == ';' || s[p] == '#') {
    // `s = torch.sum` binds s to the torch function (Checker::collect_bindings); the chain must
    // start at torch, or at a name `import torch as NAME` may have bound.
    const auto alias = [&] {
      std::size_t k = word_begin;
      const char before = previous(s, k);
      if (before == kUnknown) return true;
      if (before != '.') return false;
      while (true) {
        while (k > 0 && s[k - 1] != '.') --k;  // back over blanks to the dot
        if (k == 0) return false;
        --k;
        while (k > 0 && (s[k - 1] == ' ' || s[k - 1] == '\t' || s[k - 1] == '\\' || s[k - 1] == '\n' || s[k - 1] == '\r'))
          --k;
        const std::size_t end = k;
        while (k > 0 && kClass.ident[static_cast<unsigned char>(s[k - 1])]) --k;
        if (k == end) return false;  // a call or subscript before the dot: no alias (read_dotted)
        const char head_before = previous(s, k);
        if (head_before == kUnknown) return true;
        if (head_before == '.') continue;
        return (end - k == 5 && s.compare(k, 5, "torch") == 0) || s.find("import torch as") != std::string_view::npos;
      }
    };
    if (alias()) return true;
    // Inside brackets the call may follow on a later line: `(t.sum\n ('C'))`.
    p = skip_space_lines(s, p);
    if (p == std::string_view::npos) return true;
    return p < s.size() && s[p] == '(' && call_has_string_arg(s, p);
  }
  if (s[p] == 'a' && p + 1 < s.size() && s[p + 1] == 's' &&
      (p + 2 >= s.size() || !kClass.ident[static_cast<unsigned char>(s[p + 2])]))
    return true;  // `import ... sum as s`
  return s[p] == '(' && call_has_string_arg(s, p);
}

// At the `(` at p: a string-like value at the start of an argument or after a keyword's `=` (what
// Checker::call_might_match asks, and a little more).
bool call_has_string_arg(std::string_view s, std::size_t p) {
  int depth = 0;
  bool arg_start = true;
  for (++p; p < s.size(); ++p) {
    const char c = s[p];
    if (c == ' ' || c == '\t' || c == '\f' || c == '\n' || c == '\r' || c == '\\') continue;
    if (arg_start && depth == 0 && string_like_value(s, p)) return true;
    arg_start = false;
    if (c == '#') return true;
    if (c == '"' || c == '\'') {
      bool hit = false;
      p = skip_string(s, p, false, hit) - 1;
      if (hit) return true;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
      if (depth-- == 0) return false;
    } else if (depth == 0 && (c == ',' || (c == '=' && p + 1 < s.size() && s[p + 1] != '=' &&
                                         s[p - 1] != '=' && s[p - 1] != '!' && s[p - 1] != '<' && s[p - 1] != '>'))) {
      arg_start = true;
    }
  }
  return false;
}

// Skips a string literal whose opening quote is at p; returns the offset after its closing quote
// (or the end). An f-string's body may hold code, so it is searched for triggers as code.
std::size_t skip_string(std::string_view s, std::size_t p, bool fstring, bool& hit);

// Searches [b, e) as code. Returns true at the first trigger.
// The identifier [wb, we) of the code region ending at e: true when it is a trigger. A string
// prefix (r, b, u, f, rb, fr, ...) followed by its literal moves `next` past the literal.
bool identifier_triggers(const Words& w, std::string_view s, std::size_t wb, std::size_t we, std::size_t e,
                         std::size_t& next) {
  next = we;
  if (we < e && (s[we] == '"' || s[we] == '\'') && we - wb <= 2) {
    bool f = false, prefix = true;
    for (std::size_t k = wb; k < we; ++k) {
      const char l = static_cast<char>(s[k] | 0x20);
      f |= l == 'f';
      prefix &= l == 'r' || l == 'b' || l == 'u' || l == 'f';
    }
    if (prefix) {
      bool hit = false;
      next = skip_string(s, we, f, hit);
      return hit;
    }
  }
  switch (w.find(s.data() + wb, we - wb)) {
    case Trigger::none: return false;
    case Trigger::word: return true;
    case Trigger::attribute: {
      const char before = previous(s, wb);
      // On `torch.` too: whether that names the module (no finding) or an unknown name (a
      // low-confidence one) depends on how the checker reads the file's imports.
      if (before == '.' || before == kUnknown) {
        // unflatten is a finding only with a dimension name or a named shape.
        if (we - wb != 9 || s.compare(wb, 9, "unflatten") != 0) return true;
        const std::size_t p = skip_blank(s, we);
        if (p >= s.size() || s[p] != '(' || call_has_string_arg(s, p)) return true;
      }
      return false;
    }
    case Trigger::keyword: {
      if (we - wb == 5 && s.compare(wb, 5, "names") == 0) {
        const char before = previous(s, wb);
        return before == '.' || before == kUnknown || keyword_trigger(s, wb, we, true);
      }
      return keyword_trigger(s, wb, we, false);
    }
    case Trigger::op: return op_trigger(s, wb, we);
  }
  return false;
}

// Skips a comment or string literal at p (a '#' or a quote); true when it is itself a candidate.
bool skip_special(std::string_view s, std::size_t p, std::size_t e, std::size_t& next) {
  if (s[p] == '#') {
    const void* nl = std::memchr(s.data() + p, '\n', e - p);
    next = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - s.data()) : e;
    return false;
  }
  bool hit = false;
  next = skip_string(s, p, false, hit);
  return hit;
}

#if defined(__SSE2__)
// Bit k: byte p[k] is an identifier byte ([A-Za-z0-9_] or >= 0x80); `special`: '#' or a quote.
inline std::uint64_t classify64(const char* p, std::uint64_t& special) {
  std::uint64_t ident = 0;
  special = 0;
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    const __m128i a = _mm_sub_epi8(_mm_or_si128(v, _mm_set1_epi8(0x20)), _mm_set1_epi8('a'));
    const __m128i letter = _mm_cmpeq_epi8(_mm_min_epu8(a, _mm_set1_epi8(25)), a);
    const __m128i d = _mm_sub_epi8(v, _mm_set1_epi8('0'));
    const __m128i digit = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
    const __m128i under = _mm_cmpeq_epi8(v, _mm_set1_epi8('_'));
    const unsigned id = static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(letter, digit), under)) |
                                              _mm_movemask_epi8(v));
    const __m128i sp = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('#')),
                                    _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\''))));
    ident |= std::uint64_t{id} << (16 * k);
    special |= std::uint64_t{static_cast<unsigned>(_mm_movemask_epi8(sp))} << (16 * k);
  }
  return ident;
}
#endif

// Whether identifier_triggers needs a look: a trigger word's first byte and length, or a short
// word right before a quote (a string prefix).
inline bool worth_a_look(const Words& w, std::string_view s, std::size_t wb, std::size_t we, std::size_t e) {
  return w.may_be(s.data() + wb, we - wb) || (we - wb <= 2 && we < e && (s[we] == '"' || s[we] == '\''));
}

// Searches [b, e) as code. Returns true at the first trigger.
bool scan_code(std::string_view s, std::size_t b, std::size_t e) {
  const Words& w = words();
  std::size_t i = b;
#if defined(__SSE2__)
  // 64 bytes at a time: classify every byte with vector compares, then visit only the starts of
  // identifiers, comments and strings. A comment or string moves on past it and classifies afresh.
  while (i + 64 <= e) {
    std::uint64_t special;
    const std::uint64_t ident = classify64(s.data() + i, special);
    const std::uint64_t carry = i > b && kClass.ident[static_cast<unsigned char>(s[i - 1])] ? 1 : 0;
    std::uint64_t events = (ident & ~((ident << 1) | carry)) | special;
    std::size_t next = i + 64;
    while (events) {
      const unsigned k = static_cast<unsigned>(__builtin_ctzll(events));
      const std::size_t pos = i + k;
      if (special >> k & 1) {
        if (skip_special(s, pos, e, next)) return true;
        break;
      }
      const std::uint64_t after = ~ident >> k;  // zero bits: identifier bytes (and past the block)
      std::size_t we;
      if (after != 0 && k + static_cast<unsigned>(__builtin_ctzll(after)) < 64) {
        we = pos + static_cast<std::size_t>(__builtin_ctzll(after));
      } else {
        we = i + 64;
        while (we < e && kClass.ident[static_cast<unsigned char>(s[we])]) ++we;
      }
      if (!(s[pos] >= '0' && s[pos] <= '9') && worth_a_look(w, s, pos, we, e)) {  // (a number is no name)
        std::size_t after_word;
        if (identifier_triggers(w, s, pos, we, e, after_word)) return true;
        if (after_word != we) {
          next = after_word;
          break;
        }
      }
      if (we >= i + 64) {
        next = we;
        break;
      }
      events &= ~((std::uint64_t{1} << (we - i)) - 1);
    }
    i = next;
  }
#endif
  while (i < e) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const unsigned char act = kClass.action[c];
    if (act == 0) {
      // Operators and white space; indentation comes in runs.
      ++i;
      while (i < e && s[i] == ' ') ++i;
    } else if (act == 1) {
      const std::size_t wb = i;
      ++i;
      while (i < e && kClass.ident[static_cast<unsigned char>(s[i])]) ++i;
      if (worth_a_look(w, s, wb, i, e)) {
        std::size_t next;
        if (identifier_triggers(w, s, wb, i, e, next)) return true;
        i = next;
      }
    } else if (act == 2) {
      // A number: digits, letters (0x1f, 1e5, 2j) and the dots of a float (1.5, 1.e5, 1..real). A dot
      // before a name that starts with no digit may begin an attribute (`1.0.unflatten`, `0x.t`),
      // so the number ends there and the name is searched as code.
      while (i < e && (kClass.ident[static_cast<unsigned char>(s[i])] || s[i] == '.')) {
        if (s[i] == '.' && i + 1 < e && kClass.action[static_cast<unsigned char>(s[i + 1])] == 1) break;
        ++i;
      }
    } else {
      std::size_t next;
      if (skip_special(s, i, e, next)) return true;
      i = next;
    }
  }
  return false;
}

// An f-string from its opening quote at p: its text is not code, its replacement fields are, and
// (3.12, PEP 701, as the tokenizer) a field may hold strings in any quotes, f-strings included.
// Returns the offset after the closing quote; `hit` when a field triggers or the literal is
// unterminated.
std::size_t skip_fstring(std::string_view s, std::size_t p, bool& hit) {
  const std::size_t n = s.size();
  const char q = s[p];
  const bool triple = p + 2 < n && s[p + 1] == q && s[p + 2] == q;
  std::size_t i = p + (triple ? 3 : 1);
  while (i < n) {
    const char c = s[i];
    if (c == '\\') {
      i += 2;
    } else if (c == '\n' && !triple) {
      break;  // unterminated
    } else if (c == q && (!triple || (i + 2 < n && s[i + 1] == q && s[i + 2] == q))) {
      return i + (triple ? 3 : 1);
    } else if (c == '{' && i + 1 < n && s[i + 1] == '{') {
      i += 2;
    } else if (c == '{') {
      // A field: to the matching '}', nested brackets counted and nested strings skipped whole.
      const std::size_t fb = ++i;
      int depth = 0;
      while (i < n) {
        const char d = s[i];
        if (d == '"' || d == '\'') {
          std::size_t k = i;
          bool f = false;
          while (k > fb && kClass.ident[static_cast<unsigned char>(s[k - 1])] && i - k < 2) --k;
          for (std::size_t m = k; m < i; ++m) f |= (s[m] | 0x20) == 'f';
          i = skip_string(s, i, f, hit);
          if (hit) return n;
          continue;
        }
        if (d == '{' || d == '(' || d == '[') ++depth;
        else if ((d == ')' || d == ']') && depth > 0) --depth;
        else if (d == '}' && depth-- == 0) break;
        ++i;
      }
      if (scan_code(s, fb, std::min(i, n))) {
        hit = true;
        return n;
      }
      ++i;
    } else {
      ++i;
    }
  }
  hit = true;  // unterminated: let the tokenizer report it
  return n;
}

std::size_t skip_string(std::string_view s, std::size_t p, bool fstring, bool& hit) {
  if (fstring) return skip_fstring(s, p, hit);
  const std::size_t n = s.size();
  const char q = s[p];
  const bool triple = p + 2 < n && s[p + 1] == q && s[p + 2] == q;
  const std::size_t body = p + (triple ? 3 : 1);
  std::size_t end = n, body_end = n;
  if (!triple) {
    // Short: to the first quote, backslash or line end, 16 bytes at a time where there are 16;
    // a backslash escapes the next byte (a backslash-newline continues the literal).
    std::size_t i = body;
#if defined(__SSE2__)
    const __m128i vq = _mm_set1_epi8(q), vb = _mm_set1_epi8('\\'), vn = _mm_set1_epi8('\n'), vr = _mm_set1_epi8('\r');
    while (i + 16 <= n) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
      const __m128i hit16 = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, vq), _mm_cmpeq_epi8(v, vb)),
                                         _mm_or_si128(_mm_cmpeq_epi8(v, vn), _mm_cmpeq_epi8(v, vr)));
      const unsigned m = static_cast<unsigned>(_mm_movemask_epi8(hit16));
      if (m == 0) {
        i += 16;
        continue;
      }
      i += static_cast<std::size_t>(__builtin_ctz(m));
      if (s[i] != '\\') break;  // a quote or a line end: the byte loop below decides
      i += 2;
    }
#endif
    for (; i < n; ++i) {
      const char c = s[i];
      if (c == '\\') {
        ++i;
      } else if (c == q) {
        body_end = i;
        end = i + 1;
        break;
      } else if (c == '\n' || c == '\r') {
        break;  // unterminated
      }
    }
  } else {
    std::size_t i = body;
    while (i < n) {
      const void* at = std::memchr(s.data() + i, q, n - i);
      if (!at) break;
      const std::size_t k = static_cast<std::size_t>(static_cast<const char*>(at) - s.data());
      std::size_t bs = 0;  // escaped when preceded by an odd run of backslashes
      while (k - bs > body && s[k - bs - 1] == '\\') ++bs;
      if (bs % 2 == 0 && k + 2 < n && s[k + 1] == q && s[k + 2] == q) {
        body_end = k;
        end = k + 3;
        break;
      }
      i = k + 1;
    }
  }
  if (end == n && body_end == n) {
    hit = true;  // unterminated: let the tokenizer report it
    return n;
  }
  (void)fstring;
  return end;
}

}  // namespace

bool may_have_python_findings(std::string_view s) {
  // Comments are skipped to the next '\n': a file with lone '\r' line ends (old Mac) is left to the
  // tokenizer.
  for (const char* p = static_cast<const char*>(std::memchr(s.data(), '\r', s.size())); p;) {
    const std::size_t k = static_cast<std::size_t>(p - s.data());
    if (k + 1 >= s.size() || s[k + 1] != '\n') return true;
    p = static_cast<const char*>(std::memchr(p + 1, '\r', s.size() - k - 1));
  }
  return scan_code(s, 0, s.size());
}

}  // namespace lmcore::upgrade
