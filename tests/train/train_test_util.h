// Helpers of the training tests: a temporary run folder, synthetic token shards and a tiny model config.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmcore/core/error.h"
#include "lmcore/io/token_shard.h"
#include "lmcore/model/config.h"
#include "tests/base/base_test_util.h"

namespace lmcore::train::testing {

using base::testing::error_of;
using base::testing::TempDir;

// A learnable stream: documents of a repeating pattern with a little noise, separated by eos (id 1).
inline std::vector<std::uint32_t> synthetic_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::uint32_t> t;
  std::uint64_t s = seed;
  while (static_cast<std::int64_t>(t.size()) < n) {
    t.push_back(1);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const std::int64_t len = 20 + static_cast<std::int64_t>((s >> 33) % 40);
    const std::int64_t start = 2 + static_cast<std::int64_t>((s >> 45) % (vocab - 2));
    for (std::int64_t i = 0; i < len && static_cast<std::int64_t>(t.size()) < n; ++i)
      t.push_back(static_cast<std::uint32_t>(2 + (start + 3 * i) % (vocab - 2)));
  }
  return t;
}

inline model::ModelConfig tiny_config(std::int64_t vocab = 40) {
  model::ModelConfig c;
  c.vocab_size = vocab;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 64;
  c.max_seq_len = 64;
  c.eos_token_id = 1;
  c.bos_token_id = 1;
  return c;
}

// Writes DIR/data_train_000000.bin, DIR/data_val_000000.bin and DIR/config.json.
inline void write_dataset(const std::string& dir, const model::ModelConfig& c, std::int64_t train_tokens = 20000) {
  const auto train = synthetic_tokens(train_tokens, c.vocab_size, 1);
  const auto val = synthetic_tokens(2000, c.vocab_size, 2);
  io::write_token_shard(dir + "/data_train_000000.bin", train.data(), static_cast<std::int64_t>(train.size()), c.vocab_size);
  io::write_token_shard(dir + "/data_val_000000.bin", val.data(), static_cast<std::int64_t>(val.size()), c.vocab_size);
  std::ofstream(dir + "/config.json") << c.to_json();
}

// The "loss" of every step event in a metrics log, in order.
inline std::vector<double> logged_losses(const std::string& log) {
  std::vector<double> out;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] == "step") out.push_back(j["loss"].get<double>());
  }
  return out;
}

}  // namespace lmcore::train::testing
