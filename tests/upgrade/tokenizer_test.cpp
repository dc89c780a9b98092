// Tokenizer tests: token kinds and positions on the constructs that decide what is code.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lmcore/upgrade/tokenizer.h"

namespace lmcore::upgrade {
namespace {

// "KIND:text" for every token except NL/NEWLINE/INDENT/DEDENT/ENDMARKER, joined by '|'.
std::string kinds(const TokenizedSource& ts) {
  std::string out;
  std::vector<Token> all = ts.tokens;
  all.insert(all.end(), ts.comments.begin(), ts.comments.end());
  std::stable_sort(all.begin(), all.end(), [](const Token& a, const Token& b) { return a.begin < b.begin; });
  for (const auto& t : all) {
    if (t.kind == TokKind::nl || t.kind == TokKind::newline || t.kind == TokKind::indent ||
        t.kind == TokKind::dedent || t.kind == TokKind::endmarker)
      continue;
    if (!out.empty()) out += '|';
    out += tok_kind_name(t.kind);
    out += ':';
    out += std::string(ts.text(t));
  }
  return out;
}

TEST(UpgradeTokenizer, NamesOpsNumbersComments) {
  auto ts = tokenize("x = dist.all_gather_into_tensor(a, 1.5e-3)  # all_gather_into_tensor\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  EXPECT_EQ(kinds(ts),
            "NAME:x|OP:=|NAME:dist|OP:.|NAME:all_gather_into_tensor|OP:(|NAME:a|OP:,|NUMBER:1.5e-3|OP:)|"
            "COMMENT:# all_gather_into_tensor");
}

TEST(UpgradeTokenizer, StringPrefixesAndTripleQuotes) {
  auto ts = tokenize("a = rb'x\\'y' + B\"z\" + u'w' + Rf'{q}' + '''t\n'''\nb = \"\"\"doc \"quoted\" \"\"\"\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  EXPECT_EQ(kinds(ts),
            "NAME:a|OP:=|STRING:rb'x\\'y'|OP:+|STRING:B\"z\"|OP:+|STRING:u'w'|OP:+|STRING:Rf'{q}'|OP:+|"
            "STRING:'''t\n'''|NAME:b|OP:=|STRING:\"\"\"doc \"quoted\" \"\"\"");
  // A name that is not a prefix stays a name.
  auto ts2 = tokenize("ur'x'\n");
  EXPECT_EQ(kinds(ts2), "NAME:ur|STRING:'x'");
}

TEST(UpgradeTokenizer, FStringFieldsAreRecorded) {
  auto ts = tokenize("s = f\"{x.names!r:>{w}} {{lit}} {d['k']}\"\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  ASSERT_EQ(ts.tokens[2].kind, TokKind::string);
  std::vector<std::string> fields;
  for (auto [b, e] : ts.fstring_fields) fields.emplace_back(ts.source.substr(b, e - b));
  std::sort(fields.begin(), fields.end());
  EXPECT_EQ(fields, (std::vector<std::string>{"d['k']", "w", "x.names"}));
  // PEP 701: the same quote nested inside a field.
  auto ts2 = tokenize("s = f\"{d[\"k\"]}\" + 'x'\n");
  ASSERT_FALSE(ts2.error) << ts2.error->message;
  EXPECT_EQ(kinds(ts2), "NAME:s|OP:=|STRING:f\"{d[\"k\"]}\"|OP:+|STRING:'x'");
}

TEST(UpgradeTokenizer, BracketsAreMatched) {
  auto ts = tokenize("f(a[1], {2: (3)})\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  int brackets = 0;
  for (std::size_t i = 0; i < ts.tokens.size(); ++i) {
    const std::string_view t = ts.text(ts.tokens[i]);
    const int m = ts.match(static_cast<int>(i));
    if (t == "(" || t == "[" || t == "{") {
      ++brackets;
      ASSERT_GT(m, static_cast<int>(i)) << i;
      const std::string_view c = ts.text(ts.tokens[static_cast<std::size_t>(m)]);
      EXPECT_EQ(c, t == "(" ? ")" : t == "[" ? "]" : "}");
      EXPECT_EQ(ts.match(m), static_cast<int>(i));
    } else if (t != ")" && t != "]" && t != "}") {
      EXPECT_EQ(m, -1) << t;
    }
  }
  EXPECT_EQ(brackets, 4);
  // Only bracket tokens have entries: no per-token table.
  EXPECT_EQ(ts.match.token.size(), 8u);
  // Reusing a TokenizedSource gives the same result as a fresh one.
  TokenizedSource reused = tokenize("x = 'long string' # c\n(\n");
  tokenize_into("f(a[1], {2: (3)})\n", reused);
  EXPECT_FALSE(reused.error);
  EXPECT_EQ(kinds(reused), kinds(ts));
  EXPECT_EQ(reused.match, ts.match);
}

TEST(UpgradeTokenizer, ContinuationsCrlfAndLines) {
  auto ts = tokenize("x = 1 + \\\r\n    2\r\ny = (3,\r\n 4)\r\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  EXPECT_EQ(kinds(ts), "NAME:x|OP:=|NUMBER:1|OP:+|NUMBER:2|NAME:y|OP:=|OP:(|NUMBER:3|OP:,|NUMBER:4|OP:)");
  int newlines = 0;
  for (const auto& t : ts.tokens) newlines += t.kind == TokKind::newline;
  EXPECT_EQ(newlines, 2);  // two logical lines over four physical ones
  EXPECT_EQ(ts.tokens.back().kind, TokKind::endmarker);
  // y is on physical line 3; 4 on line 4, column 2.
  for (const auto& t : ts.tokens) {
    if (ts.text(t) == "y") { EXPECT_EQ(ts.line(t), 3u); }
    if (ts.text(t) == "4") {
      EXPECT_EQ(ts.line(t), 4u);
      EXPECT_EQ(ts.column_of(ts.line(t), t.begin), 2u);
    }
  }
  // A multi-line string is on the line it starts on; the NEWLINE after it on the line it ends on.
  auto ml = tokenize("a = '''one\ntwo\nthree''' # c\nb\n");
  ASSERT_FALSE(ml.error) << ml.error->message;
  ASSERT_EQ(ml.tokens.size(), 7u);  // a = STRING NEWLINE b NEWLINE ENDMARKER
  EXPECT_EQ(ml.line(ml.tokens[2]), 1u);
  EXPECT_EQ(ml.tokens[3].kind, TokKind::newline);
  EXPECT_EQ(ml.line(ml.tokens[3]), 3u);
  EXPECT_EQ(ml.line(ml.comments.at(0)), 3u);
  EXPECT_EQ(ml.line(ml.tokens[4]), 4u);
}

TEST(UpgradeTokenizer, TokensAreEightBytesAndReservedOnce) {
  static_assert(sizeof(Token) == 8);
  std::string src = "x = [";
  for (int i = 0; i < 100000; ++i) src += "0, ";
  src += "]\n";
  auto ts = tokenize(src);
  ASSERT_FALSE(ts.error) << ts.error->message;
  EXPECT_EQ(ts.tokens.size(), 200000u + 6);  // x = [ ] NEWLINE ENDMARKER, and each 0 and comma
  EXPECT_LE(ts.tokens.capacity(), src.size() + 16);  // one reservation, never doubled
  EXPECT_EQ(ts.match.token.size(), 2u);
  EXPECT_EQ(ts.match(2), static_cast<int>(ts.tokens.size()) - 3);
}

TEST(UpgradeTokenizer, SourcesOver256MiBAreRefused) {
  // A view of kMaxSourceBytes whose bytes are never read: the size alone decides.
  static const char one = 'x';
  const std::string_view huge(&one, kMaxSourceBytes);
  auto ts = tokenize(huge);
  ASSERT_TRUE(ts.error);
  EXPECT_NE(ts.error->message.find("268435440 bytes"), std::string::npos) << ts.error->message;
  EXPECT_NE(ts.error->message.find("256 MiB"), std::string::npos) << ts.error->message;
}

TEST(UpgradeTokenizer, IndentDedentWithTabs) {
  auto ts = tokenize("if a:\n\tif b:\n\t\tx\n\ty\nz\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  int indents = 0, dedents = 0;
  for (const auto& t : ts.tokens) indents += t.kind == TokKind::indent, dedents += t.kind == TokKind::dedent;
  EXPECT_EQ(indents, 2);
  EXPECT_EQ(dedents, 2);
  // 8 spaces vs one tab are the same column but inconsistent: CPython's TabError.
  auto bad = tokenize("if a:\n\tx\n        y\n");
  ASSERT_TRUE(bad.error);
  EXPECT_NE(bad.error->message.find("inconsistent use of tabs"), std::string::npos);
  EXPECT_EQ(bad.error->line, 3u);
}

TEST(UpgradeTokenizer, ColumnsCountCharactersNotBytes) {
  auto ts = tokenize("s = 'é€'; x.names\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  for (const auto& t : ts.tokens) {
    if (ts.text(t) == "names") { EXPECT_EQ(ts.column_of(ts.line(t), t.begin), 13u); }
  }
}

TEST(UpgradeTokenizer, StringBodiesAndOperatorBytes) {
  // Plain-string bodies are skipped by byte class: braces and the other quote are body bytes, and an
  // escaped line end continues a single-quoted string.
  auto ts = tokenize("a = '{x} \"y\" }' + \"it's\\\n{z}\"\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  EXPECT_EQ(kinds(ts), "NAME:a|OP:=|STRING:'{x} \"y\" }'|OP:+|STRING:\"it's\\\n{z}\"");
  EXPECT_TRUE(ts.fstring_fields.empty());
  // Every byte that is an operator on its own, and bytes that are none.
  auto ops = tokenize("(+-*/%@&|^~<>[],:;.={})\n");
  ASSERT_FALSE(ops.error) << ops.error->message;
  EXPECT_EQ(std::count_if(ops.tokens.begin(), ops.tokens.end(), [](const Token& t) { return t.kind == TokKind::op; }),
            23);
  const std::vector<std::string> not_ops = {"a ? b\n", "a ` b\n", "a ! b\n", std::string("a \0 b\n", 6)};
  for (const std::string& bad : not_ops) {
    auto e = tokenize(bad);
    ASSERT_TRUE(e.error) << bad;
    EXPECT_NE(e.error->message.find("invalid"), std::string::npos) << e.error->message;
    EXPECT_EQ(e.error->col, 3u) << bad;
  }
}

TEST(UpgradeTokenizer, Errors) {
  struct Case {
    const char* src;
    const char* message;
    unsigned line, col;
  };
  const Case cases[] = {
      {"x = 'abc\n", "unterminated string literal", 1, 5},
      {"x = 1\ny = \"\"\"abc\n\n", "unterminated triple-quoted string literal", 2, 5},
      {"f(a, [b)\n", "does not match opening parenthesis '['", 1, 8},
      {"x = (1,\n2\n", "'(' was never closed", 1, 5},
      {"x = 1)\n", "unmatched ')'", 1, 6},
      {"if a:\n    x\n  y\n", "unindent does not match", 3, 3},
      {"x = $y\n", "invalid character '$'", 1, 5},
      {"x = 1 \\ y\n", "after line continuation", 1, 7},
      {"ok = 1\nbad = b'\xff' \xff\n", "byte 0xFF is not valid UTF-8", 2, 9},
  };
  for (const auto& c : cases) {
    auto ts = tokenize(c.src);
    ASSERT_TRUE(ts.error) << c.src;
    EXPECT_NE(ts.error->message.find(c.message), std::string::npos) << c.src << " -> " << ts.error->message;
    EXPECT_EQ(ts.error->line, c.line) << c.src;
    EXPECT_EQ(ts.error->col, c.col) << c.src;
  }
}

TEST(UpgradeTokenizer, CodingCookies) {
  EXPECT_EQ(coding_cookie("# -*- coding: latin-1 -*-\nx = 1\n"), "latin-1");
  EXPECT_EQ(coding_cookie("#!/usr/bin/env python\n# vim: set fileencoding=utf-8 :\n"), "utf-8");
  EXPECT_EQ(coding_cookie("x = 1\n# coding: latin-1\n"), "");
  // latin-1 bytes are accepted with the cookie; columns count bytes.
  auto ts = tokenize("# coding: latin-1\ns = '\xe9'; x.names\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  EXPECT_FALSE(ts.utf8);
  for (const auto& t : ts.tokens) {
    if (ts.text(t) == "names") { EXPECT_EQ(ts.column_of(ts.line(t), t.begin), 12u); }
  }
  auto bad = tokenize("# coding: shift_jis\nx = 1\n");
  ASSERT_TRUE(bad.error);
  EXPECT_TRUE(bad.error->encoding);
}

TEST(UpgradeTokenizer, ByteOrderMarkIsNotAColumn) {
  auto ts = tokenize("\xEF\xBB\xBFx.names\r\n");
  ASSERT_FALSE(ts.error) << ts.error->message;
  EXPECT_EQ(ts.text(ts.tokens[0]), "x");
  EXPECT_EQ(ts.column_of(1, ts.tokens[0].begin), 1u);
  EXPECT_EQ(ts.column_of(1, ts.tokens[2].begin), 3u);
}

TEST(UpgradeTokenizer, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xc3\xa9"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xc0\x80"), 2u);          // overlong
  EXPECT_EQ(find_invalid_utf8("abcdefghij\xed\xa0\x80"), 10u);  // surrogate
  EXPECT_EQ(find_invalid_utf8("x\xe2\x82"), 1u);           // truncated
}

}  // namespace
}  // namespace lmcore::upgrade
