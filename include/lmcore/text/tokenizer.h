// lmcore/text/tokenizer.h — byte-level BPE (GPT-2, Llama 3, Mistral Nemo, ...): encode, decode, and the
// Hugging Face tokenizer.json and GPT-2 vocab.json + merges.txt formats.
//
//   Tokenizer tok = Tokenizer::from_file("tokenizer.json");
//   std::vector<std::uint32_t> ids = tok.encode("Hello world");           // {15496, 995} with GPT-2's
//   std::string text = tok.decode(ids);                                   // "Hello world"
//   auto batch = tok.encode_batch({"a", "b c"});                          // documents in parallel
//
// Algorithm (GPT-2's): added tokens are found first (special ones only when EncodeOptions::allow_special;
// the others always), then the text between them is cut by the pre-tokenizer's regex split (see
// pretokenizer.h), and each piece's bytes start as one token per byte and are merged pair by pair, the
// pair with the lowest merge rank first (the leftmost among equal ranks) until no pair has a rank.
// Every piece of bytes can be encoded, so encode never fails, and decode_bytes(encode(x)) == x for any
// bytes x (invalid UTF-8 included) with allow_special off, unless an added token strips white space
// (lstrip/rstrip) or the ByteLevel step adds a prefix space (both drop or add bytes, as in Hugging Face).
//
// Guarantees: a Tokenizer is immutable and thread-safe; encode and encode_batch give the same ids for any
// thread count (long texts are cut only where the split is provably unchanged; EncodeOptions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmcore/text/pretokenizer.h"

namespace lmcore::text {

namespace detail {
struct TokenizerData;
}

// A token outside the merges: special tokens (<|endoftext|>, <|begin_of_text|>) and user-added words.
struct AddedToken {
  std::uint32_t id = 0;
  std::string content;  // the text it stands for (UTF-8)
  bool special = true;  // special tokens match only with EncodeOptions::allow_special
  bool lstrip = false;  // also absorbs the white space on its left / right when matched
  bool rstrip = false;
  bool normalized = false;  // kept for tokenizer.json (no normalizer is supported, so it has no effect)
};

struct EncodeOptions {
  // Special tokens written in the text become their ids. Off: their text is ordinary bytes, so a
  // document cannot inject <|endoftext|>.
  bool allow_special = false;
  // Texts longer than this are cut at line starts where the split is unchanged (pretokenizer.h) and the
  // parts encoded in parallel; the ids do not depend on it. 0: never cut.
  std::size_t chunk_bytes = std::size_t{1} << 20;
};

// How the text is cut before BPE: the Split regexes of a tokenizer.json's Sequence pre-tokenizer, then
// its ByteLevel step (which splits with the GPT-2 pattern when use_regex is set, and first prepends a
// space to each part that does not start with one when add_prefix_space is set).
struct PreTokenizerConfig {
  std::vector<SplitPattern> splits;
  bool byte_level_use_regex = false;
  bool add_prefix_space = false;

  static PreTokenizerConfig gpt2();    // ByteLevel with use_regex: GPT-2's tokenizer.json
  static PreTokenizerConfig llama3();  // Split(llama3 pattern) + ByteLevel without regex: Llama 3's
  // "gpt2" or "llama3".
  static PreTokenizerConfig from_name(std::string_view name);
};

class Tokenizer {
 public:
  // A Hugging Face tokenizer.json whose model is BPE with a ByteLevel pre-tokenizer and decoder. Every
  // entry is checked before use; errors name the file and the entry (see tokenizer_json.cpp).
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(std::string_view json, const std::string& name = "tokenizer.json");
  // GPT-2's encoder.json/vocab.json + vocab.bpe/merges.txt, with the GPT-2 split. Vocabulary entries
  // that are neither a byte nor the result of a merge (<|endoftext|>) become special added tokens.
  static Tokenizer from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt);
  // From parts: `vocab` maps byte-level token strings to ids; `merges` are pairs of token strings in
  // rank order; the same checks as from_file.
  static Tokenizer from_parts(const std::vector<std::pair<std::string, std::uint32_t>>& vocab,
                              const std::vector<std::pair<std::string, std::string>>& merges,
                              std::vector<AddedToken> added, PreTokenizerConfig pre,
                              const std::string& name = "tokenizer");

  // tokenizer.json, written atomically; Tokenizer::from_file reads it back to the same tokenizer, and
  // Hugging Face's `tokenizers` can read it.
  void save(const std::string& path) const;
  std::string to_json() const;
  // GPT-2's vocab.json (vocabulary and added tokens) and merges.txt ("#version: 0.2" + one "a b" a line).
  void save_gpt2(const std::string& vocab_json, const std::string& merges_txt) const;

  std::vector<std::uint32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends the ids of `text` to `out`.
  void encode_into(std::string_view text, std::vector<std::uint32_t>& out, const EncodeOptions& options = {}) const;
  // One id list per text; texts (and parts of long ones) are spread over lmcore's threads.
  std::vector<std::vector<std::uint32_t>> encode_batch(std::span<const std::string_view> texts,
                                                       const EncodeOptions& options = {}) const;
  std::vector<std::vector<std::uint32_t>> encode_batch(const std::vector<std::string>& texts,
                                                       const EncodeOptions& options = {}) const;

  // Positions p (ascending, 0 < p < text.size(), about `target` bytes apart) where encode(text) equals
  // encode(text[0, p)) followed by encode(text[p, end)), in both allow_special modes: for streaming long
  // files through encode. Empty when this tokenizer's split gives no such guarantee (see
  // SplitPattern::cuts_at_lines).
  std::vector<std::size_t> cut_points(std::string_view text, std::size_t target) const;

  // The exact bytes the ids stand for (added tokens give their content), possibly invalid UTF-8. An id
  // that is not in the vocabulary is an Error naming it and its position.
  std::string decode_bytes(std::span<const std::uint32_t> ids, bool skip_special = false) const;
  // decode_bytes made valid UTF-8 the way Hugging Face's decoders do: each maximal invalid subpart
  // becomes U+FFFD.
  std::string decode(std::span<const std::uint32_t> ids, bool skip_special = false) const;
  // The bytes of one id (empty for ids not in the vocabulary).
  std::string_view token_bytes(std::uint32_t id) const;

  // Largest id + 1 (the embedding rows a model needs).
  std::int64_t vocab_size() const;
  // Id of a vocabulary string (byte-level form, "Ġthe") or of an added token's content.
  std::optional<std::uint32_t> token_to_id(std::string_view token) const;
  // Vocabulary string (byte-level form) or added token content; Error for an id not in the vocabulary.
  std::string id_to_token(std::uint32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  // The id of a special added token by content.
  std::optional<std::uint32_t> special_token_id(std::string_view content) const;
  // The document separator: the first special token among <|endoftext|>, <|end_of_text|>, </s>, <eos>.
  std::optional<std::uint32_t> end_of_text_id() const;
  // Merges in rank order, as ids (left, right); merge_result(r) is the id rank r produces.
  const std::vector<std::pair<std::uint32_t, std::uint32_t>>& merges() const;
  std::uint32_t merge_result(std::size_t rank) const;
  const PreTokenizerConfig& pre_tokenizer() const;

 private:
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerData> d) : d_(std::move(d)) {}
  friend struct detail::TokenizerData;
  std::shared_ptr<const detail::TokenizerData> d_;
};

}  // namespace lmcore::text
