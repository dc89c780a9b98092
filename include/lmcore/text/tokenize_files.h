// lmcore/text/tokenize_files.h — text files -> llm.c token shards for `lmcore train` (`lmcore tokenize`).
//
//   TokenizeOptions o;
//   o.out_dir = "data";
//   TokenizeResult r = tokenize_files(Tokenizer::from_file("tokenizer.json"), {"a.txt", "b.txt"}, o);
//   // data/train_000000.bin ..., data/val_000000.bin, data/tokenizer.json
//
// Each file is one document, preceded by the end-of-text token (as llm.c separates documents; a file
// given twice, by any name, is refused); special
// tokens written in the text are encoded as ordinary text. With two or more files, validation takes
// whole documents (chosen by a hash of the path, at least one when val_fraction > 0, never all); with
// one file, it takes the file's last val_fraction of bytes (cut at a line start). Shards hold
// shard_tokens tokens (the last one fewer), uint16 when the vocabulary has at most 65536 ids, else
// uint32 (io/token_shard.h). Files are read through memory maps and encoded in batches of about
// batch_bytes, long files in parts cut where the ids are unchanged, so memory stays bounded by the
// batch and one shard's tokens per split, not the corpus. The tokenizer is saved beside the shards, where `lmcore train` finds it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lmcore/text/tokenizer.h"

namespace lmcore::text {

struct TokenizeOptions {
  std::string out_dir;                          // created if missing; must not hold shards already
  double val_fraction = 0.01;                   // share of the documents (or bytes) for validation
  std::int64_t shard_tokens = 100'000'000;      // tokens per shard (llm.c's fineweb shards)
  std::string eot;                              // end-of-text token; "": Tokenizer::end_of_text_id()
  std::string prefix;                           // shard names: PREFIXtrain_000000.bin, PREFIXval_000000.bin
  std::size_t batch_bytes = std::size_t{64} << 20;  // text encoded per batch
  std::FILE* progress = nullptr;                // progress lines (MB/s, tokens) or none
};

struct TokenizeResult {
  std::int64_t train_tokens = 0, val_tokens = 0;
  std::int64_t documents = 0, val_documents = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::vector<std::string> train_shards, val_shards;
  std::string tokenizer_file;
  std::string train_glob, val_glob;
};

TokenizeResult tokenize_files(const Tokenizer& tokenizer, const std::vector<std::string>& files,
                              const TokenizeOptions& options);

}  // namespace lmcore::text
