// The inside of a Tokenizer: the id tables, the merge hash table, the added-token matcher, and the
// piece cache that encode keeps per thread.
//
//   bytes[offset[id] .. offset[id + 1])   raw bytes of token `id` (added tokens: their content)
//   kind[id]                              0: unused id, 1: vocabulary token, 2: added token,
//                                         3: special added token
//   vocab                                 (byte-level string, id) in the order read (ids ascending when
//                                         trained or written by lmcore)
//   merges[r], merge_results[r]           rank r merges (left, right) into merge_results[r]
//   table                                 (left, right) -> (rank, result), open addressing
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lmcore/text/tokenizer.h"

namespace lmcore::text::detail {

inline constexpr std::uint32_t kNoRank = 0xFFFFFFFFu;

// (left, right) -> (rank, result). Keys are left << 32 | right; ids are < 2^31, so ~0 marks empty.
class MergeTable {
 public:
  void build(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& merges,
             const std::vector<std::uint32_t>& results);
  struct Hit {
    std::uint32_t rank = kNoRank, result = 0;
  };
  Hit find(std::uint32_t left, std::uint32_t right) const {
    if (slots_.empty()) return {};
    const std::uint64_t key = (std::uint64_t{left} << 32) | right;
    std::uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> shift_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return {s.rank, s.result};
      if (s.key == kEmpty) return {};
      i = (i + 1) & mask_;
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct Slot {
    std::uint64_t key = kEmpty;
    std::uint32_t rank = 0, result = 0;
  };
  std::vector<Slot> slots_;
  std::uint64_t mask_ = 0;
  int shift_ = 64;
};

// Leftmost-longest search for added tokens (a byte trie).
class AddedMatcher {
 public:
  void add(std::string_view content, std::uint32_t index);
  bool empty() const { return nodes_.size() <= 1; }
  struct Match {
    std::size_t begin = 0, end = 0;
    std::uint32_t index = 0;  // into TokenizerData::added
  };
  // The leftmost match starting at or after `from`, the longest there; false when none.
  bool find(std::string_view text, std::size_t from, Match& m) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::uint32_t>> next;  // sorted by byte
    std::int64_t token = -1;
  };
  std::vector<Node> nodes_{1};
  std::array<bool, 256> first_{};
};

// Cache of piece -> ids for one thread's encode call. Bounded: cleared when full.
class PieceCache {
 public:
  PieceCache();
  // Returns the cached ids (pointer and count) or nullptr.
  const std::uint32_t* find(std::string_view piece, std::uint64_t hash, std::uint32_t& count) const;
  void insert(std::string_view piece, std::uint64_t hash, const std::uint32_t* ids, std::uint32_t count);
  static std::uint64_t hash(std::string_view piece);

 private:
  struct Entry {
    std::uint64_t hash = 0;  // 0: empty (hash() never returns 0)
    std::uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
  };
  static constexpr std::size_t kSlots = std::size_t{1} << 16;
  std::vector<Entry> table_;
  std::string keys_;
  std::vector<std::uint32_t> ids_;
  std::size_t used_ = 0;
};

struct TokenizerData {
  std::string name;  // file name, for messages
  std::string bytes;
  std::vector<std::uint64_t> offset;
  std::vector<std::uint8_t> kind;
  std::vector<std::pair<std::string, std::uint32_t>> vocab;
  std::unordered_map<std::string, std::uint32_t> vocab_index;  // byte-level string -> id
  std::vector<std::int64_t> vocab_pos;                          // id -> index into vocab, or -1
  std::unordered_map<std::string, std::uint32_t> bytes_index;  // raw bytes -> vocabulary id (ignore_merges)
  std::array<std::uint32_t, 256> byte_token{};
  std::vector<std::pair<std::uint32_t, std::uint32_t>> merges;
  std::vector<std::uint32_t> merge_results;
  MergeTable table;
  std::vector<AddedToken> added;
  AddedMatcher match_all, match_plain;  // all added tokens; the non-special ones
  PreTokenizerConfig pre;
  bool ignore_merges = false;
  // Long texts may be cut at line starts (EncodeOptions::chunk_bytes): the first split is a built-in
  // pattern, no prefix space is added, and no added token holds '\n' or strips white space.
  bool can_cut = false;
  // Parts of tokenizer.json kept as read (JSON text) so that save() writes them back: "null" or a value.
  std::string post_processor_json = "null", unk_token_json = "null";
  bool fuse_unk = false;

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(kind.size()); }
  std::string_view token_bytes(std::uint32_t id) const {
    return id < kind.size() ? std::string_view(bytes).substr(offset[id], offset[id + 1] - offset[id])
                            : std::string_view();
  }

  // Validates and builds (see from_parts). `merges` are pairs of vocabulary strings in rank order.
  static std::shared_ptr<TokenizerData> build(const std::vector<std::pair<std::string, std::uint32_t>>& vocab,
                                              const std::vector<std::pair<std::string, std::string>>& merges,
                                              std::vector<AddedToken> added, PreTokenizerConfig pre,
                                              std::string name);
  // Hugging Face's ignore_merges (Llama 3): a piece that is a whole vocabulary token is that token.
  void enable_ignore_merges();
  // A number no other TokenizerData in this process has (keys the per-thread piece caches).
  std::uint64_t serial = 0;
  static Tokenizer wrap(std::shared_ptr<const TokenizerData> d) { return Tokenizer(std::move(d)); }
  static const TokenizerData& of(const Tokenizer& t) { return *t.d_; }
};

// Encodes one piece of bytes with the merges (the cache may be null).
void bpe_encode_piece(const TokenizerData& d, std::string_view piece, std::vector<std::uint32_t>& out,
                      PieceCache* cache);

}  // namespace lmcore::text::detail
