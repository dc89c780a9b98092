// lmcore/train/data_loader.h — batches of (input, target) token windows from llm.c token shards.
//
// Each shard is cut into windows of T + 1 tokens at stride T (the last token of one window is the first
// of the next), so every token but the first is a target exactly once per epoch. Windows never span two
// shards. With shuffling, the order of all windows of the dataset is a permutation drawn from
// (seed, epoch) by a portable generator (splitmix64 + Fisher-Yates): the same batches on every machine,
// at every thread count. The position (epoch, cursor) is all a checkpoint needs to continue exactly.
//
//   TokenDataset data = TokenDataset::open("data/*_train_*.bin", config.vocab_size);
//   BatchLoader loader(data, B, T, seed, /*shuffle=*/true);
//   loader.next(inputs.data(), targets.data());   // (B, T) each
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmcore/io/token_shard.h"

namespace lmcore::train {

class TokenDataset {
 public:
  // Every shard matching the glob pattern (sorted by path), each validated against vocab_size. An
  // empty match, a bad shard or a token >= vocab_size is an error naming the file and the value.
  static TokenDataset open(const std::string& pattern, std::int64_t vocab_size);
  const std::vector<io::TokenShard>& shards() const { return shards_; }
  std::int64_t num_tokens() const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::vector<io::TokenShard> shards_;
};

// The shards of `val` that are also shards of `train` (the same file, whatever its name): a
// validation loss on them measures text the model trains on.
std::vector<std::string> shards_in_both(const TokenDataset& train, const TokenDataset& val);

struct DataPosition {
  std::int64_t epoch = 0;
  std::int64_t cursor = 0;  // windows consumed in this epoch
};

class BatchLoader {
 public:
  BatchLoader(const TokenDataset& data, std::int64_t batch, std::int64_t seq_len, std::uint64_t seed, bool shuffle);
  // inputs, targets: (batch, seq_len) row-major. Wraps to the next epoch (a new permutation) when the
  // windows of this one run out.
  void next(std::int32_t* inputs, std::int32_t* targets);
  DataPosition position() const { return pos_; }
  void set_position(const DataPosition& pos);
  std::int64_t windows_per_epoch() const { return total_; }

 private:
  void fill_order();
  void window(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const;
  const TokenDataset* data_;
  std::int64_t batch_, seq_len_;
  std::uint64_t seed_;
  bool shuffle_;
  std::vector<std::int64_t> first_window_;  // per shard: index of its first window (prefix sums)
  std::int64_t total_ = 0;
  std::vector<std::int64_t> order_;  // this epoch's permutation (empty without shuffling)
  std::int64_t order_epoch_ = -1;
  DataPosition pos_;
};

}  // namespace lmcore::train
