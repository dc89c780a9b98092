// lmcore tokenize — text files -> llm.c token shards (and tokenizer.json beside them) for lmcore train.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "lmcore/text/tokenize_files.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_tokenize(int argc, char** argv) {
  CLI::App app{"Encode text files into llm.c token shards (uint16 ids when the vocabulary fits, else uint32) for "
               "lmcore train. Each file is one document, preceded by the end-of-text token; tokenizer.json is saved "
               "beside the shards.",
               "lmcore tokenize"};
  std::string tokenizer;
  std::vector<std::string> files;
  text::TokenizeOptions o;
  int threads = 0;
  bool quiet = false;
  app.add_option("--tokenizer", tokenizer, "tokenizer.json (Hugging Face format)")->required();
  app.add_option("--out-dir", o.out_dir, "folder for train_NNNNNN.bin, val_NNNNNN.bin and tokenizer.json")->required();
  app.add_option("--val-fraction", o.val_fraction,
                 "share for validation: whole documents (files) by a hash of the path, or the end of a single file")
      ->check(in_range(0, 1, true, "a fraction in [0, 1)"))
      ->capture_default_str();
  app.add_option("--shard-tokens", o.shard_tokens, "tokens per shard")
      ->check(in_range(1, 2147483647, false, "a count in [1, 2^31 - 1] (an int32 in the shard header)"))
      ->capture_default_str();
  app.add_option("--eot", o.eot, "document separator token (default: <|endoftext|>, <|end_of_text|>, </s> or <eos>)");
  app.add_option("--threads", threads, "threads (0: LMCORE_NUM_THREADS or all cores)")
      ->check(thread_count())
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "no progress lines");
  app.add_option("files", files, "text files, one document each")->required();
  LMCORE_PARSE_ARGS(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(threads);
    o.progress = quiet ? nullptr : stderr;
    const text::Tokenizer t = text::Tokenizer::from_file(tokenizer);
    const text::TokenizeResult r = text::tokenize_files(t, files, o);
    fmt::print("{} documents ({:.1f} MB) -> {} train tokens in {} shard(s), {} val tokens ({} documents) in {} "
               "shard(s), {:.1f} s ({:.1f} MB/s, {} threads)\n",
               r.documents, static_cast<double>(r.bytes) / 1e6, r.train_tokens, r.train_shards.size(), r.val_tokens,
               r.val_documents, r.val_shards.size(), r.seconds,
               static_cast<double>(r.bytes) / 1e6 / std::max(r.seconds, 1e-9), num_threads());
    fmt::print("train with: lmcore train --data '{}' --config CONFIG.json   (vocab_size >= {}; {} is found beside "
               "the data)\n",
               r.train_glob, t.vocab_size(), r.tokenizer_file);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore tokenize: error: {}\n", e.what());
    return 1;
  }
}

}  // namespace lmcore::cli
