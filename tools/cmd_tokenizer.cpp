// lmcore tokenizer train|encode|decode — train a byte-level BPE tokenizer, or encode / decode standard
// input with one (for quick checks and scripts).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lmcore/base/atomic_file.h"
#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "lmcore/text/tokenizer.h"
#include "lmcore/text/train.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

namespace {

std::string read_stdin() {
  std::string s;
  char buf[1 << 16];
  while (true) {
    const std::size_t n = std::fread(buf, 1, sizeof(buf), stdin);
    s.append(buf, n);
    if (n < sizeof(buf)) break;
  }
  LMCORE_CHECK(!std::ferror(stdin), "cannot read standard input");
  return s;
}

}  // namespace

int run_tokenizer(int argc, char** argv) {
  CLI::App app{"Byte-level BPE tokenizers: train one on text files, or encode/decode standard input with one.",
               "lmcore tokenizer"};
  app.require_subcommand(1);

  CLI::App* train = app.add_subcommand("train", "train a tokenizer on FILES and write tokenizer.json");
  text::BpeTrainOptions o;
  std::vector<std::string> files, specials{"<|endoftext|>"};
  std::string out;
  int threads = 0;
  bool quiet = false;
  train->add_option("--vocab-size", o.vocab_size, "tokens in all: 256 bytes + merges + special tokens")
      ->check(in_range(256, 1 << 24, false, "a size in [256, 2^24] (256 bytes + merges + special tokens)"))
      ->required();
  train->add_option("--special", specials, "special token (repeat the option for more)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  train->add_option("--pattern", o.pattern, "split pattern: gpt2 | llama3")
      ->check(CLI::IsMember({"gpt2", "llama3"}))
      ->capture_default_str();
  train->add_option("--min-frequency", o.min_frequency, "pairs seen fewer times are not merged")
      ->check(non_negative())
      ->capture_default_str();
  train->add_option("--out", out, "tokenizer.json to write")->required();
  train->add_option("--threads", threads, "threads (0: LMCORE_NUM_THREADS or all cores)")
      ->check(thread_count())
      ->capture_default_str();
  train->add_flag("--quiet", quiet, "no progress lines");
  train->add_option("files", files, "text files to train on")->required();

  std::string tokenizer;
  bool allow_special = false;
  CLI::App* encode = app.add_subcommand("encode", "print the ids of standard input, separated by spaces");
  encode->add_option("--tokenizer", tokenizer, "tokenizer.json")->required();
  encode->add_flag("--allow-special", allow_special, "special tokens written in the text become their ids");
  CLI::App* decode = app.add_subcommand(
      "decode", "read ids (separated by white space) from standard input and write their bytes, adding nothing");
  decode->add_option("--tokenizer", tokenizer, "tokenizer.json")->required();

  LMCORE_PARSE_ARGS(app, argc, argv);
  try {
    if (train->parsed()) {
      if (threads > 0) set_num_threads(threads);
      o.special_tokens = specials;
      o.progress = quiet ? nullptr : stderr;
      base::check_can_create(out, "tokenizer train --out");  // before the training, not after it
      text::BpeTrainStats st;
      const text::Tokenizer t = text::train_bpe(files, o, &st);
      t.save(out);
      if (!quiet)
        fmt::print(stderr,
                   "lmcore tokenizer train: {} tokens ({} merges) from {:.1f} MB in {:.1f} s (count {:.1f} s at "
                   "{:.1f} MB/s, merge {:.1f} s at {:.0f} merges/s, {} threads) -> {}\n",
                   t.vocab_size(), st.merges, static_cast<double>(st.bytes) / 1e6, st.count_seconds + st.merge_seconds,
                   st.count_seconds, static_cast<double>(st.bytes) / 1e6 / std::max(st.count_seconds, 1e-9),
                   st.merge_seconds, static_cast<double>(st.merges) / std::max(st.merge_seconds, 1e-9), num_threads(),
                   out);
      return 0;
    }
    const text::Tokenizer t = text::Tokenizer::from_file(tokenizer);
    const std::string input = read_stdin();
    if (encode->parsed()) {
      const auto ids = t.encode(input, {.allow_special = allow_special});
      std::string line;
      line.reserve(ids.size() * 6 + 1);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) line.push_back(' ');
        line += std::to_string(ids[i]);
      }
      line.push_back('\n');
      std::fwrite(line.data(), 1, line.size(), stdout);
      return 0;
    }
    std::vector<std::uint32_t> ids;
    std::istringstream in(input);
    std::string word;
    while (in >> word) {
      std::size_t used = 0;
      unsigned long long v = 0;
      try {
        v = std::stoull(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      LMCORE_CHECK(used == word.size() && v <= 0xFFFFFFFFull && word[0] != '-',
                   "decode: expected token ids (non-negative integers) separated by white space, found '{}' (id {})",
                   word.substr(0, 40), ids.size());
      ids.push_back(static_cast<std::uint32_t>(v));
    }
    const std::string bytes = t.decode_bytes(ids);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore tokenizer: error: {}\n", e.what());
    return 1;
  }
}

}  // namespace lmcore::cli
