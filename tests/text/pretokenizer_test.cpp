// The regex split: the documented examples, invalid UTF-8, huge runs, and line cuts that leave the
// pieces unchanged. (The comparison with Python's `regex` on real files is in tests/python/test_text.py.)
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "lmcore/core/error.h"
#include "lmcore/text/pretokenizer.h"

namespace lmcore::text {
namespace {

std::vector<std::string> pieces(const SplitPattern& p, std::string_view text) {
  std::vector<std::string> out;
  for (const Span& s : p.split(text)) out.emplace_back(text.substr(s.begin, s.size()));
  return out;
}

using V = std::vector<std::string>;

TEST(Pretokenizer, Gpt2Examples) {
  const SplitPattern p = SplitPattern::gpt2();
  EXPECT_EQ(pieces(p, "Hello world!!"), (V{"Hello", " world", "!!"}));
  EXPECT_EQ(pieces(p, "I'm here, they'll go"), (V{"I", "'m", " here", ",", " they", "'ll", " go"}));
  EXPECT_EQ(pieces(p, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces(p, "x\n\n  y  "), (V{"x", "\n\n ", " y", "  "}));
  EXPECT_EQ(pieces(p, "12345 abc"), (V{"12345", " abc"}));
  EXPECT_EQ(pieces(p, "I'M"), (V{"I", "'", "M"}));  // GPT-2's contractions are case-sensitive
  EXPECT_EQ(pieces(p, ""), V{});
}

TEST(Pretokenizer, Llama3Examples) {
  const SplitPattern p = SplitPattern::llama3();
  EXPECT_EQ(pieces(p, "Hello world!!"), (V{"Hello", " world", "!!"}));
  EXPECT_EQ(pieces(p, "I'M 1234567"), (V{"I", "'M", " ", "123", "456", "7"}));
  EXPECT_EQ(pieces(p, "x.\n\ny"), (V{"x", ".\n\n", "y"}));
  EXPECT_EQ(pieces(p, "$hello"), (V{"$hello"}));
  EXPECT_EQ(pieces(p, "a \n b"), (V{"a", " \n", " b"}));
}

TEST(Pretokenizer, UnicodeClasses) {
  const SplitPattern p = SplitPattern::gpt2();
  // Letters of other scripts, combining marks (category M: not a letter, so they split off),
  // other numbers, U+3000 ideographic space, U+0085, and U+180E (not white space since Unicode 6.3).
  EXPECT_EQ(pieces(p, "日本語 テキスト"), (V{"日本語", " テキスト"}));
  EXPECT_EQ(pieces(p, "e\u0301t\u00e9"), (V{"e", "\u0301", "t\u00e9"}));
  EXPECT_EQ(pieces(p, "\u00bd\u0663 x"), (V{"\u00bd\u0663", " x"}));
  EXPECT_EQ(pieces(p, "a\u3000b"), (V{"a", "\u3000", "b"}));
  EXPECT_EQ(pieces(p, "a\u0085\u0085b"), (V{"a", "\u0085", "\u0085", "b"}));
  EXPECT_EQ(pieces(p, "a\u180e!"), (V{"a", "\u180e!"}));
  EXPECT_EQ(pieces(p, "hi 😀😀!"), (V{"hi", " 😀😀!"}));
}

TEST(Pretokenizer, InvalidUtf8IsOtherCharacter) {
  const SplitPattern g = SplitPattern::gpt2();
  EXPECT_EQ(pieces(g, "a\xff\xfe b"), (V{"a", "\xff\xfe", " b"}));
  EXPECT_EQ(pieces(g, "!\xff!"), (V{"!\xff!"}));
  EXPECT_EQ(pieces(g, " \x80x"), (V{" \x80", "x"}));
  // A truncated 3-byte sequence is two invalid bytes; a surrogate encoding (ED A0 80) three.
  EXPECT_EQ(pieces(g, "ab\xe2\x82 cd\xed\xa0\x80"), (V{"ab", "\xe2\x82", " cd", "\xed\xa0\x80"}));
  const SplitPattern l = SplitPattern::llama3();
  EXPECT_EQ(pieces(l, "\xffhello"), (V{"\xffhello"}));
}

TEST(Pretokenizer, PiecesCoverRandomBytes) {
  std::mt19937 rng(7);
  for (const SplitPattern& p : {SplitPattern::gpt2(), SplitPattern::llama3()}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::string s(rng() % 300, '\0');
      for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? " \n\t'a1\xc3\xa9"[rng() % 9] : rng());
      std::size_t at = 0;
      for (const Span& sp : p.split(s)) {
        ASSERT_EQ(sp.begin, at);
        ASSERT_GT(sp.end, sp.begin);
        at = sp.end;
      }
      ASSERT_EQ(at, s.size());
    }
  }
}

TEST(Pretokenizer, LongRunsDoNotOverflow) {
  const std::string spaces(8 << 20, ' ');
  for (const SplitPattern& p : {SplitPattern::gpt2(), SplitPattern::llama3()}) {
    EXPECT_EQ(p.split(spaces).size(), 1u);
    EXPECT_EQ(p.split(spaces + "x").size(), 2u);
    const std::string letters(4 << 20, 'a');
    EXPECT_EQ(p.split(letters).size(), 1u);
  }
}

TEST(Pretokenizer, LineCutsLeavePiecesUnchanged) {
  std::mt19937 rng(11);
  const char* alphabet[] = {"a", "b", " ", "  ", "\n", "\n\n", "\r\n", ".", "'s", "1", "é", "\t", "\xff", "x\n", "\ny"};
  for (const SplitPattern& p : {SplitPattern::gpt2(), SplitPattern::llama3()}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string s;
      const int n = static_cast<int>(rng() % 400);
      for (int i = 0; i < n; ++i) s += alphabet[rng() % std::size(alphabet)];
      if (s.empty()) continue;
      const auto whole = p.split(s);
      for (std::size_t target : {1u, 7u, 50u}) {
        std::vector<Span> parts;
        std::size_t b = 0;
        auto cuts = line_cuts(s, target);
        cuts.push_back(s.size());
        for (std::size_t c : cuts) {
          ASSERT_GT(c, b);
          for (Span sp : p.split(std::string_view(s).substr(b, c - b))) parts.push_back({sp.begin + b, sp.end + b});
          b = c;
        }
        ASSERT_EQ(parts, whole) << "pattern " << p.name() << " target " << target << " text '" << s << "'";
      }
    }
  }
}

TEST(Pretokenizer, UserPatterns) {
  const SplitPattern p(R"(\d+|\s+)");
  EXPECT_EQ(pieces(p, "ab12 c"), (V{"ab", "12", " ", "c"}));
  const SplitPattern empty_matches(R"(x*)");
  EXPECT_EQ(pieces(empty_matches, "abxxc"), (V{"ab", "xx", "c"}));
  EXPECT_FALSE(p.cuts_at_lines());
  EXPECT_THROW(SplitPattern("(unclosed"), Error);
  try {
    SplitPattern("a(b");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a(b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SplitPattern::from_name("gpt4"), Error);
}

TEST(Pretokenizer, CatastrophicUserPatternFailsInsteadOfHanging) {
  // (a+)+$ backtracks 2^n ways before the '!'; a pattern from a tokenizer.json gets a step limit.
  const SplitPattern evil(R"((a+)+$)");
  try {
    evil.split(std::string(40, 'a') + "!");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("match limit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(a+)+$"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmcore::text
