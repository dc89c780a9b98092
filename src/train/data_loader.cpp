#include "lmcore/train/data_loader.h"

#include <glob.h>

#include <algorithm>
#include <set>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"

namespace lmcore::train {

std::vector<std::string> shards_in_both(const TokenDataset& train, const TokenDataset& val) {
  std::set<base::FileId> train_files;
  for (const auto& s : train.shards())
    if (const auto id = base::file_id(s.path())) train_files.insert(*id);
  std::vector<std::string> both;
  for (const auto& s : val.shards())
    if (const auto id = base::file_id(s.path()); id && train_files.count(*id) != 0) both.push_back(s.path());
  return both;
}

TokenDataset TokenDataset::open(const std::string& pattern, std::int64_t vocab_size) {
  TokenDataset d;
  d.pattern_ = pattern;
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  LMCORE_CHECK(rc == 0 || rc == GLOB_NOMATCH, "data '{}': cannot expand the pattern (glob error {})", pattern, rc);
  LMCORE_CHECK(!paths.empty(), "data '{}': no file matches the pattern", pattern);
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) d.shards_.push_back(io::TokenShard::open(p, vocab_size));
  return d;
}

std::int64_t TokenDataset::num_tokens() const {
  std::int64_t n = 0;
  for (const auto& s : shards_) n += s.size();
  return n;
}

namespace {
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, n) without modulo bias (rejection), portable across standard libraries.
std::uint64_t uniform_below(std::uint64_t& state, std::uint64_t n) {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t r;
  do r = splitmix64(state);
  while (r >= limit);
  return r % n;
}
}  // namespace

BatchLoader::BatchLoader(const TokenDataset& data, std::int64_t batch, std::int64_t seq_len, std::uint64_t seed,
                         bool shuffle)
    : data_(&data), batch_(batch), seq_len_(seq_len), seed_(seed), shuffle_(shuffle) {
  LMCORE_CHECK(batch >= 1 && seq_len >= 1, "BatchLoader: batch and seq_len must be >= 1, found {} and {}", batch, seq_len);
  for (const auto& s : data.shards()) {
    first_window_.push_back(total_);
    total_ += s.size() > seq_len ? (s.size() - 1) / seq_len : 0;
  }
  LMCORE_CHECK(total_ >= 1,
               "data '{}': {} tokens in {} shard(s) give no window of seq_len + 1 = {} tokens inside one shard",
               data.pattern(), data.num_tokens(), data.shards().size(), seq_len + 1);
}

void BatchLoader::fill_order() {
  if (!shuffle_ || order_epoch_ == pos_.epoch) return;
  order_.resize(static_cast<std::size_t>(total_));
  for (std::int64_t i = 0; i < total_; ++i) order_[i] = i;
  std::uint64_t state = seed_ * 0x2545F4914F6CDD1Dull + static_cast<std::uint64_t>(pos_.epoch) + 1;
  for (std::int64_t i = total_ - 1; i > 0; --i)
    std::swap(order_[i], order_[uniform_below(state, static_cast<std::uint64_t>(i) + 1)]);
  order_epoch_ = pos_.epoch;
}

void BatchLoader::window(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const {
  const auto it = std::upper_bound(first_window_.begin(), first_window_.end(), index);
  const std::size_t shard = static_cast<std::size_t>(it - first_window_.begin()) - 1;
  const std::int64_t start = (index - first_window_[shard]) * seq_len_;
  const io::TokenShard& s = data_->shards()[shard];
  s.read(start, seq_len_, inputs);
  s.read(start + 1, seq_len_, targets);
}

void BatchLoader::next(std::int32_t* inputs, std::int32_t* targets) {
  for (std::int64_t b = 0; b < batch_; ++b) {
    if (pos_.cursor >= total_) {
      ++pos_.epoch;
      pos_.cursor = 0;
    }
    fill_order();
    const std::int64_t index = shuffle_ ? order_[static_cast<std::size_t>(pos_.cursor)] : pos_.cursor;
    window(index, inputs + b * seq_len_, targets + b * seq_len_);
    ++pos_.cursor;
  }
}

void BatchLoader::set_position(const DataPosition& pos) {
  LMCORE_CHECK(pos.epoch >= 0 && pos.cursor >= 0 && pos.cursor <= total_,
               "data position (epoch {}, window {}) is outside the {} windows of '{}'", pos.epoch, pos.cursor, total_,
               data_->pattern());
  pos_ = pos;
}

}  // namespace lmcore::train
