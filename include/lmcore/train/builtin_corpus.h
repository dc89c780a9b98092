// lmcore/train/builtin_corpus.h — the data of `lmcore train`'s built-in default: the Python standard
// library's sources, which every machine with lmcore's dependencies has (python3), as token shards.
//
// Every *.py file under the newest /usr/lib/python3.N is one document (sorted by path); about 1% of them,
// chosen by a hash of the path, form the validation split. Tokens come from a byte-level BPE tokenizer
// (GPT-2's split, 4096 tokens, <|endoftext|> last) trained on the training documents, with the
// end-of-text token before each document, as llm.c separates documents. The tokenizer.json and the shards
// are cached under cache_dir, keyed by the list of files (path, size, mtime), so a second run starts at
// once; the trainer stores the tokenizer.json in its checkpoints, where `lmcore generate` reads it.
#pragma once

#include <cstdint>
#include <string>

namespace lmcore::train {

struct PreparedData {
  std::string train_glob, val_glob;
  std::string tokenizer_file;  // tokenizer.json of the shards (empty: byte-level ids)
  std::int64_t vocab_size = 0;
  std::int64_t eos_token = -1;
  std::int64_t train_tokens = 0, val_tokens = 0;
  std::string description;
};

// Finds the standard library (or fails naming where it looked) and returns the shards, building them
// when they are not cached. Prints progress to stderr when verbose.
PreparedData prepare_builtin_corpus(const std::string& cache_dir, bool verbose);

// The cache folder: $LMCORE_CACHE_DIR/corpus, else $XDG_CACHE_HOME/lmcore/corpus, else ~/.cache/lmcore/corpus.
std::string default_corpus_cache_dir();

}  // namespace lmcore::train
