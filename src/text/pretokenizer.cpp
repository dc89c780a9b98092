// The regex split of byte-level BPE, on PCRE2 (8-bit, UTF + UCP, JIT). See
// include/lmcore/text/pretokenizer.h for the patterns and the rules for invalid UTF-8.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lmcore/text/pretokenizer.h"

#include <pcre2.h>

#include <string>

#include "lmcore/core/error.h"
#include "src/text/utf8.h"

namespace lmcore::text {

namespace {

// Unicode White_Space (PropList.txt). PCRE2's \s with UCP also matches U+180E MONGOLIAN VOWEL
// SEPARATOR (White_Space before Unicode 6.3), which Python's `regex`, Oniguruma and Rust do not; the
// patterns are rewritten to this explicit class so that all of them agree.
constexpr std::string_view kWhiteSpace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Replaces \s by [W] and \S by [^W] outside character classes, and \s by W inside them (W above).
// \S inside a class stays PCRE2's own; \Q...\E and POSIX classes are copied as they are.
std::string rewrite_white_space(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      if (d == 's') {
        if (in_class) out.append(kWhiteSpace);
        else out.append("[").append(kWhiteSpace).append("]");
      } else if (d == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpace).append("]");
      } else if (d == 'Q') {
        const std::size_t e = p.find("\\E", i + 1);
        const std::size_t stop = e == std::string_view::npos ? p.size() : e + 2;
        out.append(p.substr(i - 1, stop - (i - 1)));
        i = stop - 1;
      } else {
        out.push_back('\\');
        out.push_back(d);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);  // a literal ']' first in a class
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const std::size_t e = p.find(":]", i + 2);
      if (e != std::string_view::npos) {
        out.append(p.substr(i, e + 2 - i));
        i = e + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

// The placeholder each invalid byte becomes while splitting: U+E000, a private-use character, which the
// patterns class like a lone surrogate (not a letter, number, space, CR/LF or apostrophe).
constexpr char kPlaceholder[] = "\xEE\x80\x80";

}  // namespace

struct SplitPattern::Impl {
  std::string pattern, name;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

SplitPattern::SplitPattern(std::string pattern) {
  auto impl = std::make_shared<Impl>();
  impl->pattern = std::move(pattern);
  if (impl->pattern == kGpt2Pattern) impl->name = "gpt2";
  if (impl->pattern == kLlama3Pattern) impl->name = "llama3";
  const std::string compiled = rewrite_white_space(impl->pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), PCRE2_UTF | PCRE2_UCP,
                             &err, &offset, nullptr);
  if (!impl->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail("split pattern '{}': PCRE2 cannot compile it: {} (at offset {} of the compiled form '{}')", impl->pattern,
         reinterpret_cast<const char*>(msg), offset, compiled);
  }
  // JIT is an optimisation: where the platform forbids executable memory, the interpreter runs instead.
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  impl_ = std::move(impl);
}

SplitPattern SplitPattern::gpt2() {
  static const SplitPattern p{std::string(kGpt2Pattern)};
  return p;
}

SplitPattern SplitPattern::llama3() {
  static const SplitPattern p{std::string(kLlama3Pattern)};
  return p;
}

SplitPattern SplitPattern::from_name(std::string_view name) {
  if (name == "gpt2") return gpt2();
  if (name == "llama3") return llama3();
  fail("split pattern '{}' is not known; expected gpt2 or llama3", name);
}

const std::string& SplitPattern::pattern() const { return impl_->pattern; }
std::string_view SplitPattern::name() const { return impl_->name; }
bool SplitPattern::cuts_at_lines() const { return !impl_->name.empty(); }

namespace {

// A match attempt of a pattern from a tokenizer.json may take at most this many PCRE2 steps (about
// 10 MB of one piece for patterns like the built-in ones, ~20 ms), so that a pattern with catastrophic
// backtracking fails with an error naming it instead of running for hours. The built-in patterns have no
// nested quantifiers, run in linear time, and have no limit.
constexpr std::uint32_t kUserMatchLimit = 10'000'000;

// Per-thread match data and a JIT stack that grows on demand (PCRE2's default 32 KiB machine stack is
// enough for the built-in patterns; user patterns with deep backtracking get up to 64 MiB).
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* unlimited = nullptr;
  pcre2_match_context* limited = nullptr;
  pcre2_jit_stack* stack = nullptr;
  std::size_t stack_size = 0;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    unlimited = pcre2_match_context_create(nullptr);
    limited = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(unlimited, 0xFFFFFFFFu);
    pcre2_set_depth_limit(unlimited, 0xFFFFFFFFu);
    pcre2_set_match_limit(limited, kUserMatchLimit);
    pcre2_set_depth_limit(limited, kUserMatchLimit);
  }
  ~MatchState() {
    if (stack) pcre2_jit_stack_free(stack);
    pcre2_match_context_free(limited);
    pcre2_match_context_free(unlimited);
    pcre2_match_data_free(data);
  }
  bool grow_stack() {
    const std::size_t next = stack_size == 0 ? (1u << 20) : stack_size * 4;
    if (next > (64u << 20)) return false;
    if (stack) pcre2_jit_stack_free(stack);
    stack = pcre2_jit_stack_create(32 * 1024, next, nullptr);
    if (!stack) return false;
    stack_size = next;
    pcre2_jit_stack_assign(unlimited, nullptr, stack);
    pcre2_jit_stack_assign(limited, nullptr, stack);
    return true;
  }
};

MatchState& match_state() {
  thread_local MatchState s;
  return s;
}

// Splits valid UTF-8 `s`; pieces are offsets into s, passed to emit(begin, end).
template <typename Emit>
void split_valid(const SplitPattern& self, pcre2_code* code, bool jit, std::string_view s, Emit&& emit) {
  MatchState& ms = match_state();
  pcre2_match_context* const context = self.cuts_at_lines() ? ms.unlimited : ms.limited;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const std::size_t n = s.size();
  std::size_t pos = 0, last = 0;  // next search start; end of the last emitted piece
  while (pos < n) {
    int rc = jit ? pcre2_jit_match(code, subject, n, pos, 0, ms.data, context)
                 : pcre2_match(code, subject, n, pos, PCRE2_NO_UTF_CHECK, ms.data, context);
    while (rc == PCRE2_ERROR_JIT_STACKLIMIT && ms.grow_stack())
      rc = pcre2_jit_match(code, subject, n, pos, 0, ms.data, context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      fail("split pattern '{}': matching at byte {} of a {}-byte text failed: {}", self.pattern(), pos, n,
           reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.data);
    const std::size_t b = ov[0], e = ov[1];
    if (e <= b) {  // an empty match: step over one character
      pos = b + 1;
      while (pos < n && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (b > last) emit(last, b);
    emit(b, e);
    last = pos = e;
  }
  if (last < n) emit(last, n);
}

}  // namespace

void SplitPattern::split(std::string_view text, std::vector<Span>& out) const {
  const std::size_t bad = detail::first_invalid_utf8(text);
  if (bad == std::string_view::npos) {
    split_valid(*this, impl_->code, impl_->jit, text, [&](std::size_t b, std::size_t e) { out.push_back({b, e}); });
    return;
  }
  // Each invalid byte becomes the 3-byte placeholder; at[k] is the text offset of byte k of the copy
  // (entries only at character starts and the end are used).
  std::string copy;
  std::vector<std::size_t> at;
  copy.reserve(text.size() + 16);
  at.reserve(text.size() + 16);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    const int len = p[i] < 0x80 ? 1 : detail::utf8_sequence_length(p + i, text.size() - i);
    if (len == 0) {
      copy.append(kPlaceholder, 3);
      at.insert(at.end(), {i, i, i});
      ++i;
    } else {
      copy.append(text.data() + i, static_cast<std::size_t>(len));
      for (int k = 0; k < len; ++k) at.push_back(i);
      i += static_cast<std::size_t>(len);
    }
  }
  at.push_back(text.size());
  split_valid(*this, impl_->code, impl_->jit, copy,
              [&](std::size_t b, std::size_t e) { out.push_back({at[b], at[e]}); });
}

std::vector<Span> SplitPattern::split(std::string_view text) const {
  std::vector<Span> out;
  split(text, out);
  return out;
}

std::vector<std::size_t> line_cuts(std::string_view text, std::size_t target) {
  std::vector<std::size_t> cuts;
  if (target == 0) target = 1;
  auto ascii_non_space = [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7F;
  };
  std::size_t next = target;
  while (next < text.size()) {
    // The first p >= next with text[p-2] = X, text[p-1] = '\n', text[p] = Y.
    std::size_t p = next;
    bool found = false;
    while (p < text.size()) {
      const void* nl = std::memchr(text.data() + p - 1, '\n', text.size() - (p - 1));
      if (!nl) break;
      const std::size_t q = static_cast<std::size_t>(static_cast<const char*>(nl) - text.data()) + 1;  // after \n
      if (q >= text.size()) break;
      if (q >= 2 && ascii_non_space(text[q - 2]) && ascii_non_space(text[q])) {
        p = q;
        found = true;
        break;
      }
      p = q + 1;
    }
    if (!found) break;
    cuts.push_back(p);
    next = p + target;
  }
  return cuts;
}

}  // namespace lmcore::text
