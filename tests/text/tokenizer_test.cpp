// Tokenizer: encode against GPT-2's own merge loop (written here, sharing nothing with src/text), round
// trips, special tokens, decode's replacement characters, tokenizer.json and GPT-2 files, and the errors
// for malformed files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "lmcore/text/tokenizer.h"
#include "src/text/byte_level.h"

namespace lmcore::text {
namespace {

namespace fs = std::filesystem;
using text::detail::bytes_to_byte_level;

// A vocabulary of the 256 bytes (id = byte) and merges given as raw byte strings, ids 256, 257, ...
struct HandMade {
  std::vector<std::pair<std::string, std::uint32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // byte-level strings
  HandMade(const std::vector<std::pair<std::string, std::string>>& raw_merges) {
    for (int b = 0; b < 256; ++b) vocab.emplace_back(bytes_to_byte_level(std::string(1, static_cast<char>(b))), b);
    for (const auto& [a, c] : raw_merges) {
      merges.emplace_back(bytes_to_byte_level(a), bytes_to_byte_level(c));
      const std::string m = bytes_to_byte_level(a + c);
      bool have = false;
      for (const auto& v : vocab) have |= v.first == m;
      if (!have) vocab.emplace_back(m, static_cast<std::uint32_t>(vocab.size()));
    }
  }
  Tokenizer make(std::vector<AddedToken> added = {}, PreTokenizerConfig pre = PreTokenizerConfig::gpt2()) const {
    return Tokenizer::from_parts(vocab, merges, std::move(added), std::move(pre), "hand-made");
  }
};

// GPT-2's encoder.py bpe(): the lowest-ranked bigram, all its occurrences merged left to right, until
// no bigram has a rank. Works on byte-level strings, then maps them to ids.
std::vector<std::uint32_t> reference_bpe(const HandMade& h, const std::string& piece) {
  std::map<std::pair<std::string, std::string>, std::size_t> ranks;
  for (std::size_t r = 0; r < h.merges.size(); ++r) ranks.emplace(h.merges[r], r);
  std::vector<std::string> word;
  for (unsigned char c : piece) word.push_back(bytes_to_byte_level(std::string(1, static_cast<char>(c))));
  while (word.size() > 1) {
    std::size_t best = SIZE_MAX;
    std::pair<std::string, std::string> bigram;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second, bigram = it->first;
    }
    if (best == SIZE_MAX) break;
    std::vector<std::string> next;
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        next.push_back(bigram.first + bigram.second);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = std::move(next);
  }
  std::vector<std::uint32_t> ids;
  for (const std::string& w : word)
    for (const auto& v : h.vocab)
      if (v.first == w) ids.push_back(v.second);
  return ids;
}

std::vector<std::uint32_t> reference_encode(const HandMade& h, const std::string& text) {
  std::vector<std::uint32_t> ids;
  for (const Span& s : SplitPattern::gpt2().split(text)) {
    const auto p = reference_bpe(h, text.substr(s.begin, s.size()));
    ids.insert(ids.end(), p.begin(), p.end());
  }
  return ids;
}

const HandMade& sample() {
  static const HandMade h({{"a", "a"}, {"aa", "a"}, {" ", "t"}, {"h", "e"}, {" t", "he"}, {"a", "b"}, {"aa", "aa"},
                           {"ab", "c"}, {" ", " "}, {"  ", "  "}, {"b", "c"}, {"\xc3", "\xa9"}, {"e", "\xcc"},
                           {"\n", "\n"}, {"1", "2"}, {"12", "3"}, {"ab", "ab"}, {"aaa", "aaaa"}});
  return h;
}

TEST(Tokenizer, MatchesGpt2MergeLoopOnHandMadeVocab) {
  const HandMade& h = sample();
  const Tokenizer t = h.make();
  for (const std::string s : {"the", " the", "aaaaaaa", "abcabc", "aaab", "123123", "   the    a", "\n\n\n", "é",
                              "abababababab"}) {
    EXPECT_EQ(t.encode(s), reference_encode(h, s)) << "'" << s << "'";
  }
  std::mt19937 rng(3);
  const char* parts[] = {"a", "b", "c", " ", "  ", "the", "\n", "1", "2", "3", "é", "\xcc", "e", "\xff", "x"};
  for (int trial = 0; trial < 400; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % (trial % 10 == 0 ? 600 : 40));
    for (int i = 0; i < n; ++i) s += parts[rng() % std::size(parts)];
    if (trial % 7 == 0) s += std::string(200 + rng() % 300, rng() % 2 ? 'a' : ' ');  // pieces > 128 bytes
    ASSERT_EQ(t.encode(s), reference_encode(h, s)) << "'" << s << "'";
  }
}

TEST(Tokenizer, RoundTripsAnyBytes) {
  const Tokenizer t = sample().make({{.id = 300, .content = "<|endoftext|>", .special = true}});
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s(rng() % 2000, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    if (trial % 3 == 0) s += "<|endoftext|>";
    const auto ids = t.encode(s);
    ASSERT_EQ(t.decode_bytes(ids), s);
  }
}

TEST(Tokenizer, SpecialTokensOnlyWhenAllowed) {
  const Tokenizer t = sample().make({{.id = 300, .content = "<|endoftext|>", .special = true},
                                     {.id = 301, .content = "<|end|>", .special = true},
                                     {.id = 302, .content = "WORD", .special = false}});
  const std::string s = "a<|endoftext|>b<|end|>WORD";
  const auto plain = t.encode(s);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 300u), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 301u), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 302u), 1);  // non-special added tokens always match
  const auto special = t.encode(s, {.allow_special = true});
  EXPECT_EQ(special, (std::vector<std::uint32_t>{'a', 300, 'b', 301, 302}));
  EXPECT_EQ(t.decode_bytes(special), s);
  EXPECT_EQ(t.decode(special, /*skip_special=*/true), "abWORD");
  EXPECT_EQ(t.end_of_text_id(), 300u);
  EXPECT_EQ(t.token_to_id("<|end|>"), 301u);
  EXPECT_EQ(t.id_to_token(302), "WORD");
}

TEST(Tokenizer, LstripRstrip) {
  const Tokenizer t = sample().make({{.id = 300, .content = "<mask>", .special = true, .lstrip = true},
                                     {.id = 301, .content = "<r>", .special = true, .rstrip = true}});
  EXPECT_EQ(t.encode("a  <mask>b", {.allow_special = true}), (std::vector<std::uint32_t>{'a', 300, 'b'}));
  EXPECT_EQ(t.encode("a<r> \u3000b", {.allow_special = true}), (std::vector<std::uint32_t>{'a', 301, 'b'}));
}

TEST(Tokenizer, DecodeReplacesInvalidUtf8LikeHuggingFace) {
  const Tokenizer t = sample().make();
  auto dec = [&](std::string_view raw) {
    std::vector<std::uint32_t> ids;
    for (unsigned char c : raw) ids.push_back(c);
    return t.decode(ids);
  };
  // Rust's String::from_utf8_lossy: one U+FFFD per maximal subpart.
  EXPECT_EQ(dec("ok"), "ok");
  EXPECT_EQ(dec("a\xff" "b"), "a\uFFFDb");
  EXPECT_EQ(dec("\xe2\x82"), "\uFFFD");             // truncated 3-byte sequence: one subpart
  EXPECT_EQ(dec("\xe2\x82x"), "\uFFFDx");
  EXPECT_EQ(dec("\xed\xa0\x80"), "\uFFFD\uFFFD\uFFFD");  // a surrogate: three
  EXPECT_EQ(dec("\xf0\x9f\x98"), "\uFFFD");
  EXPECT_EQ(dec("\xf0\x9f\x98\x80"), "😀");
  EXPECT_EQ(dec("\xc0\xaf"), "\uFFFD\uFFFD");       // overlong
  EXPECT_EQ(dec("\xf4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_THROW(t.decode_bytes(std::vector<std::uint32_t>{1, 99999}), Error);
  try {
    t.decode_bytes(std::vector<std::uint32_t>{1, 2, 400});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 400 at position 2"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, ChunksAndThreadsGiveTheSameIds) {
  const Tokenizer t = sample().make({{.id = 300, .content = "<|endoftext|>", .special = true}});
  std::mt19937 rng(9);
  const char* parts[] = {"the", " a", "b\n", "c", "\n", "  ", "x.\ny", "<|endoftext|>", "12", "\xff"};
  std::vector<std::string> docs;
  for (int d = 0; d < 40; ++d) {
    std::string s;
    const int n = static_cast<int>(rng() % 3000);
    for (int i = 0; i < n; ++i) s += parts[rng() % std::size(parts)];
    docs.push_back(s);
  }
  const int threads = num_threads();
  for (bool special : {false, true}) {
    std::vector<std::vector<std::uint32_t>> whole;
    for (const auto& d : docs) whole.push_back(t.encode(d, {.allow_special = special, .chunk_bytes = 0}));
    for (int th : {1, 2, 3}) {
      set_num_threads(th);
      for (std::size_t chunk : {std::size_t{16}, std::size_t{100}, std::size_t{1} << 20}) {
        const EncodeOptions o{.allow_special = special, .chunk_bytes = chunk};
        EXPECT_EQ(t.encode_batch(docs, o), whole) << th << " threads, chunk " << chunk;
        for (std::size_t i = 0; i < docs.size(); i += 9) EXPECT_EQ(t.encode(docs[i], o), whole[i]);
      }
    }
  }
  set_num_threads(threads);
}

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("lmcore_text_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

TEST(Tokenizer, TokenizerJsonRoundTrip) {
  const Tokenizer t = sample().make({{.id = 300, .content = "<|endoftext|>", .special = true}});
  const std::string json = t.to_json();
  const Tokenizer u = Tokenizer::from_json(json);
  EXPECT_EQ(u.to_json(), json);
  EXPECT_EQ(u.vocab_size(), t.vocab_size());
  const std::string s = "the aaaaa abcab\n\n 123 é <|endoftext|>";
  EXPECT_EQ(u.encode(s), t.encode(s));
  EXPECT_EQ(u.encode(s, {.allow_special = true}), t.encode(s, {.allow_special = true}));
  const fs::path d = temp_dir();
  t.save((d / "tokenizer.json").string());
  EXPECT_EQ(Tokenizer::from_file((d / "tokenizer.json").string()).to_json(), json);
  // Llama 3's layout: Split + ByteLevel without regex.
  const Tokenizer l = sample().make({}, PreTokenizerConfig::llama3());
  const Tokenizer l2 = Tokenizer::from_json(l.to_json());
  EXPECT_EQ(l2.pre_tokenizer().splits.size(), 1u);
  EXPECT_EQ(l2.pre_tokenizer().splits[0].name(), "llama3");
  EXPECT_EQ(l2.encode("I'M 12345"), l.encode("I'M 12345"));
  fs::remove_all(d);
}

TEST(Tokenizer, Gpt2FilesRoundTrip) {
  const Tokenizer t = sample().make({{.id = 300, .content = "<|endoftext|>", .special = true}});
  const fs::path d = temp_dir();
  t.save_gpt2((d / "vocab.json").string(), (d / "merges.txt").string());
  std::ifstream m(d / "merges.txt");
  std::string first;
  std::getline(m, first);
  EXPECT_EQ(first, "#version: 0.2");
  const Tokenizer u = Tokenizer::from_gpt2_files((d / "vocab.json").string(), (d / "merges.txt").string());
  EXPECT_EQ(u.special_token_id("<|endoftext|>"), 300u);
  const std::string s = "the aaaaa abcab <|endoftext|>";
  EXPECT_EQ(u.encode(s, {.allow_special = true}), t.encode(s, {.allow_special = true}));
  EXPECT_EQ(u.merges(), t.merges());
  fs::remove_all(d);
}

// A tokenizer.json built from JSON text with one part replaced, for the error tests.
std::string json_with(const std::string& model_extra, const std::string& merges, const std::string& top_extra = "") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string s = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
    if (s == "\"") s = "\\\"";
    if (s == "\\") s = "\\\\";
    vocab += "\"" + s + "\": " + std::to_string(b) + ", ";
  }
  vocab += R"("ab": 256, "abc": 257, "Ġt": 258)";
  return R"({"version": "1.0", )" + top_extra +
         R"("added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
  "use_regex": true}, "post_processor": null, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", )" +
         model_extra + R"("vocab": {)" + vocab + "}, " + merges + "}}";
}

std::string replace_first(std::string s, const std::string& from, const std::string& to) {
  const std::size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

void expect_error(const std::string& json, const std::string& needle) {
  try {
    Tokenizer::from_json(json, "tok.json");
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

TEST(Tokenizer, MalformedTokenizerJson) {
  const std::string good = json_with("", R"("merges": ["a b", "ab c", "Ġ t"])");
  EXPECT_EQ(Tokenizer::from_json(good).encode("abc t"), (std::vector<std::uint32_t>{257, 258}));
  EXPECT_EQ(Tokenizer::from_json(json_with("", R"("merges": [["a", "b"], ["ab", "c"]])")).merges().size(), 2u);
  expect_error(json_with("", R"("no_merges": [])"), "model has no 'merges'");
  expect_error(json_with("", R"("merges": ["ab c", "a b"])"), "merge 0 'ab c': 'ab' is neither a byte nor the result of an earlier merge (ranks out of order)");
  expect_error(json_with("", R"("merges": ["a b", "x yz"])"), "merge 1 'x yz': 'yz' is not in the vocabulary");
  expect_error(json_with("", R"("merges": ["a b", "b c"])"), "merge 1 'b c': the merged token 'bc' is not in the vocabulary");
  expect_error(json_with("", R"("merges": ["a b", "a b"])"), "merge 1 'a b' repeats merge 0");
  expect_error(json_with("", R"("merges": ["a  b"])"), "merge 0 'a  b' is not two tokens separated by one space");
  expect_error(json_with("", R"("merges": [3])"), "merge 0 must be");
  {
    expect_error(replace_first(good, R"("abc": 257)", R"("abc": 256)"), "tokens 'ab' and 'abc' both have id 256");
  }
  {
    expect_error(replace_first(good, R"("Ċ": 10, )", ""), "vocab has no token for byte 0x0A ('Ċ')");
  }
  expect_error(replace_first(good, R"("type": "BPE")", R"("type": "Unigram")"),
               "model type 'Unigram' is not supported");
  expect_error(replace_first(good, R"("type": "BPE")", R"("type": "WordPiece")"),
               "model type 'WordPiece' is not supported");
  expect_error(json_with(R"("byte_fallback": true, )", R"("merges": [])"), "byte_fallback");
  expect_error(json_with(R"("dropout": 0.1, )", R"("merges": [])"), "dropout 0.1 is not supported");
  expect_error(json_with("", R"("merges": [])", R"("normalizer": {"type": "NFC"}, )"), "the key 'normalizer' appears twice");
  expect_error(replace_first(good, R"("normalizer": null)", R"("normalizer": {"type": "NFKC"})"),
               "normalizer 'NFKC' is not supported");
  expect_error(replace_first(good, R"({"type": "ByteLevel", "add_prefix_space")", R"({"type": "Metaspace", "x")"),
               "pre_tokenizer 'Metaspace' is not supported");
  expect_error(replace_first(good, R"("decoder": {"type": "ByteLevel"})", R"("decoder": null)"),
               "decoder 'null' is not supported");
  expect_error(replace_first(good, R"("added_tokens": [])", R"("added_tokens": [{"id": 256, "content": "<s>", "special": true}])"),
               "added token '<s>' has id 256, which the vocabulary gives to 'ab'");
  expect_error(replace_first(good, R"("added_tokens": [])", R"("added_tokens": [{"id": 300, "content": "<s>"}, {"id": 301, "content": "<s>"}])"),
               "'<s>' is given twice (ids 300 and 301)");
  expect_error(replace_first(good, R"("ab": 256)", R"("ab": 99999999)"),
               "has id 99999999, above the largest supported id");
  expect_error(replace_first(good, R"("ab": 256)", R"("ab": -1)"), "vocab 'ab': id must be an integer");
  expect_error("{\"model\": ", "not valid JSON");
  expect_error(std::string(300, '[') + std::string(300, ']'), "nested deeper than 64");
  expect_error("[]", "expected a JSON object at the top");
}

TEST(Tokenizer, IgnoreMergesTakesWholeTokens) {
  // "abc" is a vocabulary token that no merge produces: the merges give "ab" "c", while ignore_merges
  // (Llama 3) takes a piece that is a whole token as that token.
  EXPECT_EQ(Tokenizer::from_json(json_with("", R"("merges": ["a b"])")).encode("abc"),
            (std::vector<std::uint32_t>{256, 'c'}));
  EXPECT_EQ(Tokenizer::from_json(json_with(R"("ignore_merges": true, )", R"("merges": ["a b"])")).encode("abc"),
            (std::vector<std::uint32_t>{257}));
}

}  // namespace
}  // namespace lmcore::text
