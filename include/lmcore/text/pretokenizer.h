// lmcore/text/pretokenizer.h — the regex split that byte-level BPE applies before merging.
//
// Byte-level BPE (GPT-2) never merges across the pieces this split produces: a piece is a word with its
// leading space, a run of digits, a run of punctuation or a run of whitespace. The two split patterns
// in use are built in and compiled with PCRE2 (UTF + Unicode properties, JIT when the platform allows):
//
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//           \s*[\r\n]+|\s+(?!\S)|\s+
//
//   SplitPattern p = SplitPattern::gpt2();
//   std::vector<Span> pieces;
//   p.split("Hello world!!", pieces);   // {0,5} "Hello", {5,11} " world", {11,13} "!!"
//
// Pieces cover the text exactly, in order: the text between two matches is a piece of its own (Hugging
// Face's "Isolated" split behaviour), and empty matches are skipped.
//
// Invalid UTF-8: the text may hold any bytes. Each byte that is not part of a well-formed UTF-8
// sequence is split as one character of the class "other" (not a letter, number or space), exactly as
// Python splits `bytes.decode("utf-8", "surrogateescape")`, where such a byte becomes a lone surrogate.
// So a piece may hold invalid bytes, and the pieces still concatenate to the input.
//
// Unicode classes are PCRE2's (Unicode 14 in Debian 12's 10.42); \s is Unicode White_Space (PCRE2's
// \s plus U+0085 NEXT LINE, which Python's `regex`, Oniguruma and Rust's regex also count as space).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmcore::text {

// A byte range [begin, end) of the text given to split().
struct Span {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
  bool operator==(const Span&) const = default;
};

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class SplitPattern {
 public:
  static SplitPattern gpt2();
  static SplitPattern llama3();
  // "gpt2" or "llama3"; anything else is an Error listing both.
  static SplitPattern from_name(std::string_view name);
  // Any PCRE2 pattern (the Split pre-tokenizer of a tokenizer.json). Errors name the pattern and the
  // offset PCRE2 reports.
  explicit SplitPattern(std::string pattern);

  const std::string& pattern() const;
  // "gpt2", "llama3", or "" for another pattern.
  std::string_view name() const;

  // Appends the pieces of `text` to `out` (offsets relative to text.data()). Thread-safe.
  void split(std::string_view text, std::vector<Span>& out) const;
  std::vector<Span> split(std::string_view text) const;

  // For the built-in patterns: a line start preceded by "X\n" and followed by Y, where X and Y are ASCII
  // characters that are not whitespace, is a boundary of every split of every text containing it, so
  // splitting the parts on either side gives the same pieces as splitting the whole. Long texts are cut
  // there to be split (and encoded) in parallel. False for other patterns.
  bool cuts_at_lines() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// Positions p in (0, text.size()) where SplitPattern::cuts_at_lines() allows a cut, chosen so that the
// parts are about `target` bytes long (the first allowed position at or after each multiple of target;
// parts may be longer when no position is allowed). Depends only on the text and target.
std::vector<std::size_t> line_cuts(std::string_view text, std::size_t target);

}  // namespace lmcore::text
