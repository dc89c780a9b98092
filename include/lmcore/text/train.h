// lmcore/text/train.h — training a byte-level BPE tokenizer on a corpus.
//
//   BpeTrainOptions o;
//   o.vocab_size = 32000;
//   o.special_tokens = {"<|endoftext|>"};
//   Tokenizer tok = train_bpe({"corpus/a.txt", "corpus/b.txt"}, o);
//   tok.save("tokenizer.json");
//
// Algorithm:
//   1. count: the files are cut into parts of about 1 MiB at line starts where the split is unchanged
//      (pretokenizer.h), special tokens written in the text are cut out, and the parts are split into
//      pieces and counted on lmcore's threads (per-thread tables, summed);
//   2. every distinct piece becomes a word of byte tokens (ids 0..255 are the bytes) with its count;
//   3. merge: the most frequent adjacent pair (ties: the smallest (left id, right id)) becomes a new
//      token, id 256, 257, ... (a merge whose bytes are already a token reuses that id); only the words
//      that hold the pair are rewritten, and pair counts change by the differences (a max-heap with
//      lazy deletion holds the candidates), so no merge recounts the corpus. Stops at vocab_size or when
//      no pair occurs at least max(min_frequency, 1) times;
//   4. the special tokens get the ids after the last merge, in the order given.
// The merges depend only on the corpus bytes, the pattern, the special tokens and vocab_size: the same
// for any thread count and file order within the list.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "lmcore/text/tokenizer.h"

namespace lmcore::text {

struct BpeTrainOptions {
  std::int64_t vocab_size = 8192;           // bytes + merges + special tokens
  std::vector<std::string> special_tokens;  // e.g. "<|endoftext|>"; ids after the merges
  std::string pattern = "gpt2";             // split: gpt2 | llama3 (written into the tokenizer.json)
  std::int64_t min_frequency = 0;           // pairs seen fewer times are not merged
  std::FILE* progress = nullptr;            // progress lines (MB/s while counting, merges/s) or none
  std::size_t part_bytes = std::size_t{1} << 20;  // size of the parts counted in parallel
};

struct BpeTrainStats {
  std::uint64_t bytes = 0;           // corpus size
  std::uint64_t pieces = 0;          // pieces counted
  std::uint64_t distinct_pieces = 0;
  std::int64_t merges = 0;
  double count_seconds = 0, merge_seconds = 0;
};

// Trains on the files (read through memory maps). Errors name the file.
Tokenizer train_bpe(const std::vector<std::string>& files, const BpeTrainOptions& options,
                    BpeTrainStats* stats = nullptr);
// Trains on texts in memory (each one a document).
Tokenizer train_bpe_texts(const std::vector<std::string_view>& texts, const BpeTrainOptions& options,
                          BpeTrainStats* stats = nullptr);

}  // namespace lmcore::text
