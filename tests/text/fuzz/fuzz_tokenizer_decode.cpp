// libFuzzer target: encode and decode of untrusted bytes with a fixed tokenizer (merges over common
// bytes, special and added tokens). Checks: decode_bytes(encode(x)) == x; the ids do not depend on how
// the text is cut for the threads; any id sequence decodes to its exact bytes or an Error naming an id
// outside the vocabulary; decode's output is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lmcore/core/error.h"
#include "lmcore/text/tokenizer.h"
#include "src/text/byte_level.h"
#include "src/text/utf8.h"

namespace {

const lmcore::text::Tokenizer& tokenizer() {
  using namespace lmcore::text;
  static const Tokenizer t = [] {
    std::vector<std::pair<std::string, std::uint32_t>> vocab;
    std::vector<std::pair<std::string, std::string>> merges;
    auto bl = [](std::string s) { return detail::bytes_to_byte_level(s); };
    for (int b = 0; b < 256; ++b) vocab.emplace_back(bl(std::string(1, static_cast<char>(b))), b);
    const char* raw[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"\n", "\n"}, {" ", " "}, {"  ", "  "},
                            {"\xc3", "\xa9"}, {"e", "r"}, {"i", "n"}, {"in", "g"}, {"1", "2"}, {"\xe2", "\x80"}};
    for (const auto& m : raw) {
      merges.emplace_back(bl(m[0]), bl(m[1]));
      vocab.emplace_back(bl(std::string(m[0]) + m[1]), static_cast<std::uint32_t>(vocab.size()));
    }
    std::vector<AddedToken> added = {{.id = 300, .content = "<|endoftext|>", .special = true},
                                     {.id = 301, .content = "<s>", .special = true},
                                     {.id = 302, .content = "lmcore", .special = false}};
    return Tokenizer::from_parts(vocab, merges, added, PreTokenizerConfig::gpt2(), "fuzz");
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto& t = tokenizer();
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    // The bytes as text.
    for (bool special : {false, true}) {
      const auto whole = t.encode(rest, {.allow_special = special, .chunk_bytes = 0});
      if (t.decode_bytes(whole) != rest) std::abort();
      if (t.encode(rest, {.allow_special = special, .chunk_bytes = std::size_t{1} + data[0] % 64u}) != whole) std::abort();
      if (lmcore::text::detail::first_invalid_utf8(t.decode(whole)) != std::string_view::npos) std::abort();
    }
  } else {
    // The bytes as little-endian 16-bit ids (some outside the vocabulary).
    std::vector<std::uint32_t> ids;
    for (std::size_t i = 0; i + 1 < rest.size(); i += 2)
      ids.push_back((static_cast<std::uint8_t>(rest[i]) | (static_cast<std::uint8_t>(rest[i + 1]) << 8)) % 320);
    try {
      const std::string raw = t.decode_bytes(ids);
      std::size_t n = 0;
      for (auto id : ids) n += t.token_bytes(id).size();
      if (raw.size() != n) std::abort();
      if (lmcore::text::detail::first_invalid_utf8(t.decode(ids)) != std::string_view::npos) std::abort();
    } catch (const lmcore::Error&) {
      bool bad = false;
      for (auto id : ids) bad |= id >= t.vocab_size() || t.token_bytes(id).empty();
      if (!bad) std::abort();
    }
  }
  return 0;
}
