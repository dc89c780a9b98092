// lmcore generate — sample text from a checkpoint with a KV cache.
#include <filesystem>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lmcore/model/checkpoint.h"
#include "lmcore/model/generate.h"
#include "lmcore/train/checkpoint.h"
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

}  // namespace

int run_generate(int argc, char** argv) {
  CLI::App app{"Sample from a trained model (a checkpoint folder or a run folder's newest checkpoint) with a KV "
               "cache.",
               "lmcore generate"};
  std::string checkpoint, prompt, prompt_ids;
  model::SampleOptions o;
  app.add_option("--checkpoint", checkpoint, "checkpoint folder, or run folder (its newest checkpoint)")->required();
  app.add_option("--prompt", prompt, "text to continue (tokenized with the checkpoint's tokenizer)");
  app.add_option("--prompt-ids", prompt_ids, "token ids to continue, separated by spaces (instead of --prompt)");
  app.add_option("--max-tokens", o.max_tokens, "tokens to sample")->capture_default_str();
  app.add_option("--temperature", o.temperature, "softmax temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", o.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the sampling")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const std::string dir = train::resolve_checkpoint(checkpoint);
    const model::LoadedModel m = model::load_model_folder(dir);
    const bool has_tokenizer = std::filesystem::is_regular_file(std::filesystem::path(dir) / "tokenizer.json");
    LMCORE_CHECK(!has_tokenizer, "{}: tokenizer.json checkpoints need the tokenizer part, which this build lacks", dir);
    const bool bytes = m.config.vocab_size == 257 && m.config.eos_token_id == 256;
    std::vector<std::int32_t> ids;
    if (!prompt_ids.empty()) {
      std::istringstream in(prompt_ids);
      long long v;
      while (in >> v) ids.push_back(static_cast<std::int32_t>(v));
      LMCORE_CHECK(in.eof(), "--prompt-ids: expected integers separated by spaces, found '{}'", prompt_ids);
    } else {
      LMCORE_CHECK(bytes, "{}: no tokenizer.json and not a byte-level model; give --prompt-ids", dir);
      if (m.config.eos_token_id >= 0) ids.push_back(static_cast<std::int32_t>(m.config.eos_token_id));
      const auto p = ByteCodec{}.encode(prompt);
      ids.insert(ids.end(), p.begin(), p.end());
    }
    model::Generator g(m.config, m.params);
    fmt::print("{}", prompt);
    std::fflush(stdout);
    g.generate(ids, o, [&](std::int32_t t) {
      if (bytes) fmt::print("{}", ByteCodec{}.decode(t));
      else fmt::print("{} ", t);
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
