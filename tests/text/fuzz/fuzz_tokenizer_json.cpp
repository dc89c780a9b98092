// libFuzzer target: tokenizer.json from untrusted bytes. Any input must give a tokenizer or an
// lmcore::Error, never a crash, a leak, undefined behaviour or a hang; a tokenizer that loads must
// write a tokenizer.json that loads back to the same text, and encode/decode must keep their promises.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lmcore/core/error.h"
#include "lmcore/text/tokenizer.h"
#include "src/text/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  using lmcore::text::Tokenizer;
  try {
    const Tokenizer t = Tokenizer::from_json(bytes, "fuzz");
    // Written and read back: the same file.
    const std::string json = t.to_json();
    if (Tokenizer::from_json(json, "fuzz (written)").to_json() != json) std::abort();
    const std::string text = std::string("Hello world, it's 2024!\n\n  \xff\xfe caf\xc3\xa9 <|endoftext|> ") +
                             std::string(bytes.substr(0, 16));
    for (bool special : {false, true}) {
      const auto ids = t.encode(text, {.allow_special = special});
      const std::string back = t.decode_bytes(ids);
      bool strips = t.pre_tokenizer().add_prefix_space;
      for (const auto& a : t.added_tokens()) strips |= a.lstrip || a.rstrip;
      if (!special && !strips && back != text) std::abort();  // lossless without stripping tokens
      if (lmcore::text::detail::first_invalid_utf8(t.decode(ids)) != std::string_view::npos) std::abort();
    }
    std::vector<std::uint32_t> any;
    for (std::size_t i = 0; i + 1 < size && i < 64; i += 2) any.push_back(data[i] | (data[i + 1] << 8));
    try {
      (void)t.decode(any);
    } catch (const lmcore::Error&) {  // ids outside the vocabulary
    }
  } catch (const lmcore::Error&) {
  }
  return 0;
}
