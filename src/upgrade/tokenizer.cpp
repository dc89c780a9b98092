// Python tokenizer for upgrade-check. See include/lmcore/upgrade/tokenizer.h for what it covers.
// One forward pass over the bytes; tokens are 16-byte records with byte offsets, so the whole torch
// tree tokenizes without a per-token allocation.
#include "lmcore/upgrade/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

namespace lmcore::upgrade {

const char* tok_kind_name(TokKind kind) {
  switch (kind) {
    case TokKind::name: return "NAME";
    case TokKind::number: return "NUMBER";
    case TokKind::string: return "STRING";
    case TokKind::op: return "OP";
    case TokKind::newline: return "NEWLINE";
    case TokKind::nl: return "NL";
    case TokKind::comment: return "COMMENT";
    case TokKind::indent: return "INDENT";
    case TokKind::dedent: return "DEDENT";
    case TokKind::endmarker: return "ENDMARKER";
  }
  return "?";
}

bool is_python_keyword(std::string_view w) {
  // Called for every name token: dispatch on the first letter before comparing.
  if (w.size() < 2 || w.size() > 8) return false;
  switch (w[0]) {
    case 'F': return w == "False";
    case 'N': return w == "None";
    case 'T': return w == "True";
    case 'a': return w == "and" || w == "as" || w == "assert" || w == "async" || w == "await";
    case 'b': return w == "break";
    case 'c': return w == "class" || w == "continue";
    case 'd': return w == "def" || w == "del";
    case 'e': return w == "elif" || w == "else" || w == "except";
    case 'f': return w == "finally" || w == "for" || w == "from";
    case 'g': return w == "global";
    case 'i': return w == "if" || w == "import" || w == "in" || w == "is";
    case 'l': return w == "lambda";
    case 'n': return w == "nonlocal" || w == "not";
    case 'o': return w == "or";
    case 'p': return w == "pass";
    case 'r': return w == "raise" || w == "return";
    case 't': return w == "try";
    case 'w': return w == "while" || w == "with";
    case 'y': return w == "yield";
    default: return false;
  }
}

std::uint32_t TokenizedSource::column_of(std::uint32_t line, std::uint32_t offset) const {
  if (line == 0 || line > line_starts.size()) return 1;
  std::uint32_t start = line_starts[line - 1];
  // A UTF-8 BOM is not a character of line 1 (Python's tokenize drops it too).
  if (line == 1 && source.size() >= 3 && source.substr(0, 3) == "\xEF\xBB\xBF") start = 3;
  if (offset < start) return 1;
  if (!utf8) return offset - start + 1;
  std::uint32_t chars = 0;
  for (std::uint32_t i = start; i < offset && i < source.size(); ++i)
    chars += (static_cast<unsigned char>(source[i]) & 0xC0) != 0x80;
  return chars + 1;
}

std::int32_t BracketPairs::operator()(std::int32_t i) const {
  auto it = std::lower_bound(token.begin(), token.end(), i);
  if (it == token.end() || *it != i) return -1;
  return partner[static_cast<std::size_t>(it - token.begin())];
}

std::uint32_t TokenizedSource::line_of(std::uint32_t offset) const {
  auto it = std::upper_bound(line_starts.begin(), line_starts.end(), offset);
  return static_cast<std::uint32_t>(it - line_starts.begin());
}

std::size_t find_invalid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time: the common case for source code.
    if (i + 8 <= n) {
      std::uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return i;
    if (i + len > n) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string coding_cookie(std::string_view source) {
  // PEP 263: a comment matching `coding[:=]\s*([-\w.]+)` on line 1 or 2 (line 2 only when line 1 is
  // blank or a comment).
  std::size_t pos = 0;
  for (int line = 0; line < 2 && pos < source.size(); ++line) {
    std::size_t eol = source.find_first_of("\r\n", pos);
    if (eol == std::string_view::npos) eol = source.size();
    std::string_view l = source.substr(pos, eol - pos);
    std::size_t k = 0;
    while (k < l.size() && (l[k] == ' ' || l[k] == '\t' || l[k] == '\f')) ++k;
    if (k < l.size() && l[k] == '#') {
      const std::size_t c = l.find("coding", k);
      if (c != std::string_view::npos && c + 6 < l.size() && (l[c + 6] == ':' || l[c + 6] == '=')) {
        std::size_t v = c + 7;
        while (v < l.size() && (l[v] == ' ' || l[v] == '\t')) ++v;
        std::string name;
        while (v < l.size() && (std::isalnum(static_cast<unsigned char>(l[v])) || l[v] == '-' ||
                                l[v] == '_' || l[v] == '.'))
          name += static_cast<char>(std::tolower(static_cast<unsigned char>(l[v++])));
        if (!name.empty()) return name;
      }
    } else if (k < l.size()) {
      return "";  // line 1 is code: a cookie on line 2 does not count
    }
    pos = eol;
    if (pos < source.size() && source[pos] == '\r') ++pos;
    if (pos < source.size() && source[pos] == '\n') ++pos;
  }
  return "";
}

namespace {

// Byte classes, by table: the C library's isalpha/isalnum consult the locale on every call.
struct CharTable {
  bool start[256] = {}, ident[256] = {};
  constexpr CharTable() {
    for (int c = 0; c < 256; ++c) {
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
      start[c] = alpha;
      ident[c] = alpha || (c >= '0' && c <= '9');
    }
  }
};
constexpr CharTable kChars;
bool is_ident_start(unsigned char c) { return kChars.start[c]; }
bool is_ident_char(unsigned char c) { return kChars.ident[c]; }

// Bytes that end a run of plain string-body bytes: quotes, backslash, line ends and (for f-strings)
// braces. Docstrings are a large share of the bytes of a typical tree, so their bodies are skipped
// with one table lookup per byte instead of a chain of comparisons.
struct StringStopTable {
  bool plain[256] = {}, fstring[256] = {};
  constexpr StringStopTable() {
    for (const unsigned char c : {'"', '\'', '\\', '\n', '\r'}) plain[c] = fstring[c] = true;
    fstring[static_cast<unsigned char>('{')] = fstring[static_cast<unsigned char>('}')] = true;
  }
};
constexpr StringStopTable kStringStops;

// Single-byte operators and delimiters (the bytes scan_op accepts on their own).
struct OpTable {
  bool single[256] = {};
  constexpr OpTable() {
    for (const unsigned char c : {'+', '-', '*', '/', '%', '@', '&', '|', '^', '~', '<', '>', '(', ')', '[', ']',
                                  '{', '}', ',', ':', ';', '.', '='})
      single[c] = true;
  }
};
constexpr OpTable kOps;

// Encodings whose bytes below 0x80 are ASCII and which never use an ASCII byte inside a multi-byte
// character, so tokenizing the raw bytes is exact.
enum class Encoding { utf8, single_byte, ascii, unsupported };
Encoding classify_encoding(const std::string& name) {
  std::string n = name;
  std::replace(n.begin(), n.end(), '_', '-');
  if (n.empty() || n == "utf-8" || n == "utf8" || n == "utf-8-sig" || n.rfind("utf-8-", 0) == 0) return Encoding::utf8;
  if (n == "ascii" || n == "us-ascii") return Encoding::ascii;
  if (n == "latin-1" || n == "latin1" || n == "l1" || n.rfind("iso-8859", 0) == 0 || n.rfind("iso8859", 0) == 0 ||
      n.rfind("cp125", 0) == 0 || n.rfind("windows-125", 0) == 0 || n == "cp437" || n == "cp850" || n == "koi8-r" ||
      n == "koi8-u" || n == "mac-roman")
    return Encoding::single_byte;
  return Encoding::unsupported;
}

class Lexer {
 public:
  Lexer(std::string_view s, TokenizedSource& out) : s_(s), n_(s.size()), out_(out) {}

  void run() {
    out_.line_starts.push_back(0);
    if (n_ >= 3 && std::memcmp(s_.data(), "\xEF\xBB\xBF", 3) == 0) pos_ = 3;
    bool at_line_start = true;
    while (!failed()) {
      if (at_line_start && brackets_.empty()) {
        if (!indentation()) break;
        at_line_start = false;
        if (failed()) break;
      }
      skip_spaces();
      if (pos_ >= n_) break;
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '#') {
        // Scans use a local index: a loop that stores the member pos_ on every byte is several times slower.
        const std::size_t b = pos_;
        std::size_t p = pos_ + 1;
        while (p < n_ && s_[p] != '\n' && s_[p] != '\r') ++p;
        pos_ = p;
        emit(TokKind::comment, b, pos_);
      } else if (c == '\n' || c == '\r') {
        const std::size_t b = pos_;
        consume_newline();
        const bool logical = brackets_.empty() && logical_has_tokens_;
        emit(logical ? TokKind::newline : TokKind::nl, b, pos_);
        if (logical) logical_has_tokens_ = false;
        at_line_start = brackets_.empty();
      } else if (c == '\\') {
        ++pos_;
        if (pos_ >= n_) return error_at(pos_ - 1, "unexpected EOF while parsing (line continuation at end of file)");
        if (s_[pos_] != '\n' && s_[pos_] != '\r')
          return error_at(pos_ - 1, "unexpected character after line continuation character");
        consume_newline();
      } else if (is_ident_start(c)) {
        const std::size_t b = pos_;
        std::size_t p = pos_ + 1;
        while (p < n_ && is_ident_char(static_cast<unsigned char>(s_[p]))) ++p;
        pos_ = p;
        if (pos_ < n_ && (s_[pos_] == '"' || s_[pos_] == '\'') && string_prefix(b, pos_)) {
          scan_string_token(b);
        } else {
          emit(TokKind::name, b, pos_);
        }
      } else if ((c >= '0' && c <= '9') || (c == '.' && pos_ + 1 < n_ && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')) {
        scan_number();
      } else if (c == '"' || c == '\'') {
        scan_string_token(pos_);
      } else {
        // The commonest operators are one byte; they skip scan_op's longest-match switch.
        const char next = pos_ + 1 < n_ ? s_[pos_ + 1] : '\0';
        if (c == ',' || (c == '.' && next != '.') || ((c == ':' || c == '=') && next != '=')) {
          emit(TokKind::op, pos_, pos_ + 1);
          ++pos_;
        } else if (c == '(' || c == '[' || c == '{') {
          open_bracket(static_cast<char>(c));
          emit(TokKind::op, pos_, pos_ + 1);
          ++pos_;
        } else {
          scan_op();
        }
      }
    }
    if (failed()) return;
    if (!brackets_.empty()) {
      const auto& open = brackets_.back();
      return error_at(open.offset, fmt::format("'{}' was never closed", open.ch));
    }
    if (logical_has_tokens_) emit(TokKind::newline, pos_, pos_);
    while (indents_.size() > 1) {
      indents_.pop_back();
      emit(TokKind::dedent, pos_, pos_);
    }
    emit(TokKind::endmarker, pos_, pos_);
  }

 private:
  struct Open {
    char ch;
    std::size_t offset;
    std::size_t pair;  // index of the opening token's entry in out_.match
  };

  bool failed() const { return out_.error.has_value(); }

  // Called before the opening token is emitted.
  void open_bracket(char c) {
    brackets_.push_back(Open{c, pos_, out_.match.token.size()});
    out_.match.token.push_back(static_cast<std::int32_t>(out_.tokens.size()));
    out_.match.partner.push_back(-1);
  }

  void emit(TokKind kind, std::size_t b, std::size_t e) {
    Token t;
    t.begin = static_cast<std::uint32_t>(b);
    t.end = static_cast<std::uint32_t>(e);
    t.kind = kind;
    if (kind == TokKind::comment) {
      out_.comments.push_back(t);
      return;
    }
    if (kind == TokKind::nl) return;
    out_.tokens.push_back(t);
    if (kind != TokKind::newline && kind != TokKind::indent && kind != TokKind::dedent) logical_has_tokens_ = true;
  }

  void error_at(std::size_t offset, std::string message) {
    TokenizeError e;
    e.offset = static_cast<std::uint32_t>(std::min(offset, n_));
    e.line = out_.line_of(e.offset);
    e.col = out_.column_of(e.line, e.offset);
    e.message = std::move(message);
    out_.error = std::move(e);
  }

  void consume_newline() {
    if (s_[pos_] == '\r' && pos_ + 1 < n_ && s_[pos_ + 1] == '\n') pos_ += 2;
    else ++pos_;
    ++line_;
    out_.line_starts.push_back(static_cast<std::uint32_t>(pos_));
  }

  void skip_spaces() {
    std::size_t p = pos_;
    while (p < n_ && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\f')) ++p;
    pos_ = p;
  }

  // Measures the indentation of a new logical line and emits INDENT/DEDENT. Blank and comment-only
  // lines do not take part (CPython's rule). Returns false at end of input.
  bool indentation() {
    std::size_t col = 0, alt = 0;
    const std::size_t b = pos_;
    std::size_t p = pos_;
    while (p < n_) {
      const char c = s_[p];
      if (c == ' ') ++col, ++alt;
      else if (c == '\t') col = (col / 8 + 1) * 8, ++alt;
      else if (c == '\f') col = alt = 0;
      else break;
      ++p;
    }
    pos_ = p;
    if (pos_ >= n_) return false;
    const char c = s_[pos_];
    if (c == '#' || c == '\n' || c == '\r') return true;  // blank or comment line
    if (c == '\\' && pos_ + 1 < n_ && (s_[pos_ + 1] == '\n' || s_[pos_ + 1] == '\r')) return true;
    if (col > indents_.back()) {
      if (alt <= alt_indents_.back()) {
        error_at(pos_, "inconsistent use of tabs and spaces in indentation");
        return true;
      }
      indents_.push_back(col);
      alt_indents_.push_back(alt);
      emit(TokKind::indent, b, pos_);
    } else {
      while (col < indents_.back()) {
        indents_.pop_back();
        alt_indents_.pop_back();
        emit(TokKind::dedent, pos_, pos_);
      }
      if (col != indents_.back()) {
        error_at(pos_, "unindent does not match any outer indentation level");
        return true;
      }
      if (alt != alt_indents_.back()) error_at(pos_, "inconsistent use of tabs and spaces in indentation");
    }
    return true;
  }

  // True when s_[b, e) is a legal string prefix: r, u, b, f, br, rb, fr, rf in any case.
  bool string_prefix(std::size_t b, std::size_t e) const {
    const std::size_t len = e - b;
    if (len > 2) return false;
    bool r = false, u = false, by = false, f = false;
    for (std::size_t i = b; i < e; ++i) {
      switch (std::tolower(static_cast<unsigned char>(s_[i]))) {
        case 'r': if (r) return false; r = true; break;
        case 'u': if (u) return false; u = true; break;
        case 'b': if (by) return false; by = true; break;
        case 'f': if (f) return false; f = true; break;
        default: return false;
      }
    }
    if (u && len != 1) return false;
    if (by && f) return false;
    return true;
  }

  void scan_string_token(std::size_t begin) {
    const std::size_t end = scan_string(begin);
    if (failed()) return;
    pos_ = end;
    emit(TokKind::string, begin, end);
  }

  // Scans a string literal starting at its prefix; returns the offset just past the closing quote.
  std::size_t scan_string(std::size_t begin) {
    std::size_t p = begin;
    bool is_f = false;
    while (p < n_ && s_[p] != '"' && s_[p] != '\'') {
      if (std::tolower(static_cast<unsigned char>(s_[p])) == 'f') is_f = true;
      ++p;
    }
    const char q = s_[p];
    const bool triple = p + 2 < n_ && s_[p + 1] == q && s_[p + 2] == q;
    const std::uint32_t start_line = line_;
    p += triple ? 3 : 1;
    const bool* stops = is_f ? kStringStops.fstring : kStringStops.plain;
    while (true) {
      while (p < n_ && !stops[static_cast<unsigned char>(s_[p])]) ++p;
      if (p >= n_) {
        error_at(begin, triple ? fmt::format("unterminated triple-quoted string literal (detected at line {})", line_)
                               : fmt::format("unterminated string literal (detected at line {})", start_line));
        return p;
      }
      const char c = s_[p];
      if (c == '\\') {
        ++p;
        if (p < n_ && (s_[p] == '\n' || s_[p] == '\r')) {
          pos_ = p;
          consume_newline();
          p = pos_;
        } else if (p < n_) {
          ++p;
        }
        continue;
      }
      if (c == '\n' || c == '\r') {
        if (!triple) {
          error_at(begin, fmt::format("unterminated string literal (detected at line {})", start_line));
          return p;
        }
        pos_ = p;
        consume_newline();
        p = pos_;
        continue;
      }
      if (c == q) {
        if (!triple) return p + 1;
        if (p + 2 < n_ && s_[p + 1] == q && s_[p + 2] == q) return p + 3;
        ++p;
        continue;
      }
      if (is_f && c == '{') {
        if (p + 1 < n_ && s_[p + 1] == '{') {
          p += 2;
          continue;
        }
        p = scan_fstring_field(p + 1);
        if (failed()) return p;
        continue;
      }
      if (is_f && c == '}') {
        if (p + 1 < n_ && s_[p + 1] == '}') {
          p += 2;
          continue;
        }
        error_at(p, "f-string: single '}' is not allowed");
        return p;
      }
      ++p;
    }
  }

  // Scans an f-string replacement field from just after its '{' to just after its '}'. Nested strings
  // of any quote are allowed (PEP 701), as are nested fields inside the format spec.
  std::size_t scan_fstring_field(std::size_t p) {
    const std::size_t expr_begin = p;
    std::size_t expr_end = std::string_view::npos;
    int depth = 0;
    bool in_spec = false;
    while (true) {
      if (p >= n_) {
        error_at(expr_begin - 1, "f-string: expecting '}'");
        return p;
      }
      const char c = s_[p];
      if (in_spec) {
        if (c == '{') {
          if (p + 1 < n_ && s_[p + 1] == '{') { p += 2; continue; }
          p = scan_fstring_field(p + 1);
          if (failed()) return p;
          continue;
        }
        if (c == '}') break;
        if (c == '\n' || c == '\r') {
          pos_ = p;
          consume_newline();
          p = pos_;
          continue;
        }
        ++p;
        continue;
      }
      if (c == '\n' || c == '\r') {
        pos_ = p;
        consume_newline();
        p = pos_;
        continue;
      }
      if (c == '"' || c == '\'') {
        p = scan_string(p);
        if (failed()) return p;
        continue;
      }
      if (is_ident_start(static_cast<unsigned char>(c))) {
        const std::size_t b = p;
        while (p < n_ && is_ident_char(static_cast<unsigned char>(s_[p]))) ++p;
        if (p < n_ && (s_[p] == '"' || s_[p] == '\'') && string_prefix(b, p)) {
          p = scan_string(b);
          if (failed()) return p;
        }
        continue;
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      else if (c == ')' || c == ']') --depth;
      else if (c == '}') {
        if (depth == 0) break;
        --depth;
      } else if (depth == 0 && c == '!' && p + 1 < n_ && s_[p + 1] != '=') {
        if (expr_end == std::string_view::npos) expr_end = p;
      } else if (depth == 0 && c == ':') {
        if (expr_end == std::string_view::npos) expr_end = p;
        in_spec = true;
      }
      ++p;
    }
    if (expr_end == std::string_view::npos) expr_end = p;
    out_.fstring_fields.emplace_back(static_cast<std::uint32_t>(expr_begin), static_cast<std::uint32_t>(expr_end));
    return p + 1;
  }

  void scan_number() {
    const std::size_t b = pos_;
    const bool radix = s_[pos_] == '0' && pos_ + 1 < n_ && std::strchr("xXoObB", s_[pos_ + 1]) != nullptr &&
                       s_[pos_ + 1] != '\0';
    if (radix) pos_ += 2;
    while (pos_ < n_) {
      const char c = s_[pos_];
      if (is_ident_char(static_cast<unsigned char>(c)) || (!radix && c == '.')) {
        ++pos_;
      } else if (!radix && (c == '+' || c == '-') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')) {
        ++pos_;
      } else {
        break;
      }
    }
    emit(TokKind::number, b, pos_);
  }

  void scan_op() {
    const char c0 = s_[pos_];
    const char c1 = pos_ + 1 < n_ ? s_[pos_ + 1] : '\0';
    const char c2 = pos_ + 2 < n_ ? s_[pos_ + 2] : '\0';
    std::size_t len = 0;
    // Longest match among Python's operators, by first byte.
    switch (c0) {
      case '*': case '/': case '>': case '<':
        if (c1 == c0) len = c2 == '=' ? 3 : 2;
        else if (c1 == '=') len = 2;
        break;
      case '.':
        if (c1 == '.' && c2 == '.') len = 3;
        break;
      case '-':
        if (c1 == '>' || c1 == '=') len = 2;
        break;
      case '!':
        if (c1 == '=') len = 2;
        break;
      case ':':
        if (c1 == '=') len = 2;
        break;
      case '=': case '+': case '%': case '&': case '|': case '^': case '@':
        if (c1 == '=') len = 2;
        break;
      default:
        break;
    }
    const char c = s_[pos_];
    if (!len) {
      if (!kOps.single[static_cast<unsigned char>(c)]) {
        const unsigned char u = static_cast<unsigned char>(c);
        return error_at(pos_, u < 0x80 && std::isprint(u) ? fmt::format("invalid character '{}' (U+{:04X})", c, u)
                                                           : fmt::format("invalid non-printable character U+{:04X}", u));
      }
      len = 1;
    }
    const auto index = static_cast<std::int32_t>(out_.tokens.size());
    if (len == 1 && (c == '(' || c == '[' || c == '{')) {
      open_bracket(c);
    } else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
      if (brackets_.empty()) return error_at(pos_, fmt::format("unmatched '{}'", c));
      const Open open = brackets_.back();
      const char want = open.ch == '(' ? ')' : open.ch == '[' ? ']' : '}';
      if (c != want)
        return error_at(pos_, fmt::format("closing parenthesis '{}' does not match opening parenthesis '{}'", c, open.ch));
      brackets_.pop_back();
      emit(TokKind::op, pos_, pos_ + len);
      out_.match.partner[open.pair] = index;
      out_.match.token.push_back(index);
      out_.match.partner.push_back(out_.match.token[open.pair]);
      pos_ += len;
      return;
    }
    emit(TokKind::op, pos_, pos_ + len);
    pos_ += len;
  }

  std::string_view s_;
  std::size_t n_;
  std::size_t pos_ = 0;
  std::uint32_t line_ = 1;
  TokenizedSource& out_;
  std::vector<std::size_t> indents_{0}, alt_indents_{0};
  std::vector<Open> brackets_;
  bool logical_has_tokens_ = false;
};

}  // namespace

TokenizedSource tokenize(std::string_view source) {
  TokenizedSource out;
  tokenize_into(source, out);
  return out;
}

void tokenize_into(std::string_view source, TokenizedSource& out) {
  out.source = source;
  out.tokens.clear();
  out.comments.clear();
  out.match.clear();
  out.line_starts.clear();
  out.fstring_fields.clear();
  out.error.reset();
  out.utf8 = true;
  if (source.size() >= kMaxSourceBytes) {
    out.line_starts.push_back(0);
    out.error = TokenizeError{1, 1, 0, fmt::format("file is {} bytes; upgrade-check tokenizes files under {} bytes (256 MiB)",
                                                   source.size(), kMaxSourceBytes)};
    return;
  }
  const std::string cookie = coding_cookie(source);
  const Encoding enc = classify_encoding(cookie);
  if (enc == Encoding::unsupported) {
    out.line_starts.push_back(0);
    out.error = TokenizeError{1, 1, 0, fmt::format("encoding '{}' (coding cookie) is not supported; "
                                                   "upgrade-check reads UTF-8 and single-byte encodings", cookie),
                              true};
    return;
  }
  out.utf8 = enc == Encoding::utf8;
  std::size_t bad = std::string_view::npos;
  if (enc == Encoding::utf8) {
    bad = find_invalid_utf8(source);
  } else if (enc == Encoding::ascii) {
    for (std::size_t i = 0; i < source.size() && bad == std::string_view::npos; ++i)
      if (static_cast<unsigned char>(source[i]) >= 0x80) bad = i;
  }
  if (bad != std::string_view::npos) {
    // Report where, counting lines and characters up to the bad byte (which is valid up to there).
    out.line_starts.push_back(0);
    for (std::size_t i = 0; i < bad; ++i) {
      if (source[i] == '\n' || (source[i] == '\r' && (i + 1 >= source.size() || source[i + 1] != '\n')))
        out.line_starts.push_back(static_cast<std::uint32_t>(i + 1));
    }
    TokenizeError e;
    e.offset = static_cast<std::uint32_t>(bad);
    e.line = static_cast<std::uint32_t>(out.line_starts.size());
    e.col = out.column_of(e.line, e.offset);
    e.message = fmt::format("byte 0x{:02X} is not valid {}; {}", static_cast<unsigned char>(source[bad]),
                            enc == Encoding::ascii ? "ASCII" : "UTF-8",
                            cookie.empty() ? "the file declares no encoding (PEP 263), so it must be UTF-8"
                                           : fmt::format("the file declares '{}'", cookie));
    e.encoding = true;
    out.error = std::move(e);
    return;
  }
  // Every token but a DEDENT takes at least one byte, so this is nearly always enough: the list never
  // doubles (a doubling holds the old and the new buffer at once). Pages past the tokens written are
  // reserved address space, not memory.
  out.tokens.reserve(source.size() + 16);
  Lexer(source, out).run();
}

}  // namespace lmcore::upgrade
