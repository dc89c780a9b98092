// lmcore/upgrade/tokenizer.h — a Python tokenizer, so that `upgrade-check` can tell code from
// comments, strings and docstrings without regular expressions over lines.
//
//   auto src = upgrade::tokenize(text);            // never throws on bad input
//   if (src.error) report(src.error->line, src.error->col, src.error->message);
//   for (const auto& t : src.tokens)
//     if (t.kind == upgrade::TokKind::name) use(src.text(t));
//
// It follows CPython's tokenizer (Lib/tokenize.py, Parser/tokenizer.c) in the parts that decide what
// is code: string prefixes (r, b, u, f and their combinations, any case), single and triple quotes,
// backslash escapes and line continuations, f-strings with nested replacement fields (3.12 rules,
// which accept every 3.11 f-string), comments, implicit joining inside brackets, INDENT/DEDENT with
// tabs expanded to multiples of 8 and CPython's tab/space consistency check, \n, \r\n and lone \r
// line ends, a UTF-8 BOM, and PEP 263 coding cookies (UTF-8 is validated; single-byte encodings such
// as latin-1 are accepted byte for byte). An f-string is one `string` token, as in Python <= 3.11;
// the byte ranges of its replacement-field expressions are listed in `fstring_fields` so that a
// checker can look inside them.
//
// Errors a tokenizer can see — unterminated strings, unbalanced brackets, inconsistent dedents,
// stray characters, bad continuations, invalid UTF-8 — stop tokenizing and are returned in `error`
// with a 1-based line and 1-based column; the tokens before the error are kept. Grammar errors that
// need a parser (e.g. `def (:`) are not detected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmcore::upgrade {

enum class TokKind : std::uint8_t {
  name,       // identifiers and keywords
  number,
  string,     // any string literal incl. prefix; an f-string is one token
  op,         // operators and delimiters, longest match
  newline,    // end of a logical line
  nl,         // (not emitted: line ends that do not end a logical line carry no meaning here)
  comment,    // from '#' to the end of the physical line, without the line end (in `comments`)
  indent,
  dedent,
  endmarker,
};

const char* tok_kind_name(TokKind kind);

// 8 bytes: a token per source byte is possible (`x=[0,0,...]`), so the token list is the tokenizer's
// memory; the line and an operator's bytes are found from the offsets instead of being stored.
struct Token {
  std::uint32_t begin = 0;               // byte offsets into the source, [begin, end)
  std::uint32_t end : 28 = 0;            // sources are limited to kMaxSourceBytes
  TokKind kind : 4 = TokKind::endmarker;
};
static_assert(sizeof(Token) == 8);

// Largest source `tokenize` accepts (offsets are 28-bit); larger ones get an `error`.
inline constexpr std::size_t kMaxSourceBytes = (std::size_t{1} << 28) - 16;

// Matching brackets, kept for bracket tokens only (a per-token table would cost 4 bytes a token).
struct BracketPairs {
  std::vector<std::int32_t> token;    // indices of the bracket tokens, increasing
  std::vector<std::int32_t> partner;  // index of the matching bracket token (-1 while unclosed)

  // Index of the token matching token `i`, or -1 if `i` is not a (closed) bracket.
  std::int32_t operator()(std::int32_t i) const;
  void clear() { token.clear(); partner.clear(); }
  bool operator==(const BracketPairs&) const = default;
};

struct TokenizeError {
  std::uint32_t line = 0;    // 1-based
  std::uint32_t col = 0;     // 1-based, in characters
  std::uint32_t offset = 0;  // byte offset
  std::string message;
  bool encoding = false;  // the bytes are not valid in the file's encoding (nothing was tokenized)
};

struct TokenizedSource {
  std::string_view source;              // the bytes tokenized (not owned)
  std::vector<Token> tokens;               // code tokens: everything but comments (and NL)
  std::vector<Token> comments;             // comment tokens, in order
  BracketPairs match;                      // match(i): index of the bracket matching token i, or -1
  std::vector<std::uint32_t> line_starts;  // byte offset of each physical line; line_starts[0] == 0
  std::vector<std::pair<std::uint32_t, std::uint32_t>> fstring_fields;  // expression byte ranges
  std::optional<TokenizeError> error;
  bool utf8 = true;  // false when a coding cookie names a single-byte encoding (1 byte == 1 char)

  std::string_view text(const Token& t) const { return source.substr(t.begin, t.end - t.begin); }
  // 1-based physical line of the token's first byte.
  std::uint32_t line(const Token& t) const { return line_of(t.begin); }
  // 1-based column, in characters (as flake8 and ruff count), of byte `offset` on physical `line`.
  std::uint32_t column_of(std::uint32_t line, std::uint32_t offset) const;
  // Line (1-based) that contains byte `offset`.
  std::uint32_t line_of(std::uint32_t offset) const;
};

// Tokenizes `source`. Never throws for bad input; see `error`. Sources of kMaxSourceBytes (256 MiB)
// or more are rejected through `error`. Memory: the source's size times about 8 bytes per token.
TokenizedSource tokenize(std::string_view source);
// The same into `out`, reusing its vectors' capacity (one per worker thread saves the allocations).
void tokenize_into(std::string_view source, TokenizedSource& out);

// The encoding named by a PEP 263 cookie in the first two lines, lower-cased, or "" if none.
std::string coding_cookie(std::string_view source);

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
std::size_t find_invalid_utf8(std::string_view bytes);

bool is_python_keyword(std::string_view word);

}  // namespace lmcore::upgrade
