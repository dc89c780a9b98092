// lmcore generate — sample text from a checkpoint with a KV cache; prompts and samples go through the
// checkpoint's tokenizer.json when it has one, else the built-in byte-level vocabulary.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lmcore/model/checkpoint.h"
#include "lmcore/model/generate.h"
#include "lmcore/text/tokenizer.h"
#include "lmcore/train/checkpoint.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

namespace {

// Byte-level text <-> ids, for checkpoints of the built-in corpus (256 byte ids + end-of-text).
struct ByteCodec {
  std::vector<std::int32_t> encode(const std::string& s) const {
    std::vector<std::int32_t> ids;
    for (unsigned char c : s) ids.push_back(c);
    return ids;
  }
  std::string decode(std::int32_t id) const { return id < 256 ? std::string(1, static_cast<char>(id)) : std::string(); }
};

// "12 7 300" -> ids; nullopt when a word is not a whole integer in [0, 2^31) (a cast to int32 used to
// wrap 4294967297 to token 1 without a word).
std::optional<std::vector<std::int32_t>> parse_token_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (errno != 0 || end != word.c_str() + word.size() || v < 0 || v > std::numeric_limits<std::int32_t>::max()) {
      return std::nullopt;
    }
    ids.push_back(static_cast<std::int32_t>(v));
  }
  return ids;
}

}  // namespace

int run_generate(int argc, char** argv) {
  CLI::App app{"Sample from a trained model (a checkpoint folder or a run folder's newest checkpoint) with a KV "
               "cache.",
               "lmcore generate"};
  std::string checkpoint, prompt, prompt_ids;
  model::SampleOptions o;
  app.add_option("--checkpoint", checkpoint, "checkpoint folder, or run folder (its newest checkpoint)")->required();
  CLI::Option* text =
      app.add_option("--prompt", prompt, "text to continue (tokenized with the checkpoint's tokenizer)");
  app.add_option("--prompt-ids", prompt_ids, "token ids to continue, separated by spaces (instead of --prompt)")
      ->excludes(text);
  app.add_option("--max-tokens", o.max_tokens, "tokens to sample")->check(cli::non_negative())->capture_default_str();
  app.add_option("--temperature", o.temperature, "softmax temperature (0: greedy)")
      ->check(cli::non_negative())
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "sample among the k most likely tokens (0: all)")
      ->check(cli::non_negative())
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the sampling")->capture_default_str();
  LMCORE_PARSE_ARGS(app, argc, argv);
  // --prompt-ids is read before anything loads, so a malformed list is a usage error.
  const std::optional<std::vector<std::int32_t>> ids_from_text = parse_token_ids(prompt_ids);
  if (!ids_from_text) {
    fmt::print(stderr,
               "lmcore generate: --prompt-ids: expected token ids in [0, 2147483647] separated by spaces, found "
               "'{}'; `lmcore generate --help` lists the options\n",
               prompt_ids);
    return cli::kUsageError;
  }
  try {
    const std::string dir = train::resolve_checkpoint(checkpoint);
    const model::LoadedModel m = model::load_model_folder(dir);
    // The checkpoint's tokenizer.json (a run on BPE shards); else the built-in byte-level vocabulary.
    std::optional<text::Tokenizer> tok;
    const std::filesystem::path tj = std::filesystem::path(dir) / "tokenizer.json";
    if (std::filesystem::is_regular_file(tj)) {
      tok = text::Tokenizer::from_file(tj.string());
      LMCORE_CHECK(tok->vocab_size() <= m.config.vocab_size,
                   "{}: the tokenizer has {} ids but the model's vocab_size is {}: they do not belong together",
                   tj.string(), tok->vocab_size(), m.config.vocab_size);
    }
    const bool bytes = !tok && m.config.vocab_size == 257 && m.config.eos_token_id == 256;
    std::vector<std::int32_t> ids;
    if (!prompt_ids.empty()) {
      ids = *ids_from_text;
    } else {
      LMCORE_CHECK(tok || bytes, "{}: no tokenizer.json and not a byte-level model; give --prompt-ids", dir);
      // Training documents start after the end-of-text token (llm.c's layout): so does the prompt.
      if (m.config.eos_token_id >= 0) ids.push_back(static_cast<std::int32_t>(m.config.eos_token_id));
      if (tok) {
        for (std::uint32_t t : tok->encode(prompt)) ids.push_back(static_cast<std::int32_t>(t));
      } else {
        const auto p = ByteCodec{}.encode(prompt);
        ids.insert(ids.end(), p.begin(), p.end());
      }
    }
    LMCORE_CHECK(!ids.empty(), "nothing to continue: give --prompt or --prompt-ids");
    // The cache holds the prompt and the tokens to sample, not every position the config allows.
    const std::int64_t limit = m.config.max_seq_len, prompt_len = static_cast<std::int64_t>(ids.size());
    LMCORE_CHECK(prompt_len <= limit, "the prompt has {} tokens, more than the model's max_position_embeddings {}",
                 prompt_len, limit);
    const std::int64_t sampled = std::clamp<std::int64_t>(o.max_tokens, 0, limit - prompt_len);
    // Said before the first token, so that a short answer is not mistaken for an end-of-text stop.
    if (sampled < o.max_tokens)
      fmt::print(stderr,
                 "lmcore generate: samples at most {} of the {} tokens asked for: with the prompt's {} tokens that "
                 "fills the model's max_position_embeddings ({})\n",
                 sampled, o.max_tokens, prompt_len, limit);
    model::Generator g(m.config, m.params, std::min(limit, prompt_len + sampled));
    fmt::print("{}", prompt);
    std::fflush(stdout);
    g.generate(ids, o, [&](std::int32_t t) {
      if (tok) {
        // The token's exact bytes (a character split over two tokens arrives whole once both are out);
        // ids past the tokenizer's (the model may have more rows) and special tokens print nothing.
        const auto id = static_cast<std::uint32_t>(t);
        const bool special = id == static_cast<std::uint32_t>(m.config.eos_token_id) ||
                             std::any_of(tok->added_tokens().begin(), tok->added_tokens().end(),
                                         [&](const text::AddedToken& a) { return a.special && a.id == id; });
        if (!special) {
          const std::string_view b = tok->token_bytes(id);
          std::fwrite(b.data(), 1, b.size(), stdout);
        }
      } else if (bytes) {
        fmt::print("{}", ByteCodec{}.decode(t));
      } else {
        fmt::print("{} ", t);
      }
      std::fflush(stdout);
    });
    fmt::print("\n");
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore generate: error: {}\n", e.what());
    return 1;
  }
}

}  // namespace lmcore::cli
