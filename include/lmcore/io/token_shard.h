// lmcore/io/token_shard.h — llm.c token shards: the files `lmcore tokenize` writes and `lmcore train` reads.
//
// Format (llm.c, dev/data/data_common.py):
//   [256 x int32 little-endian header][count tokens]
//   header[0] = magic, header[1] = version, header[2] = count; the rest is zero.
//     magic 20240520, version 1: tokens are uint16 (GPT-2 sized vocabularies, <= 65536 ids);
//     magic 20240801, version 7: tokens are uint32.
//   The file ends exactly after the last token.
// Documents are concatenated, each preceded (as llm.c does) by the end-of-text token.
//
//   lmcore::io::write_token_shard("data/train_000000.bin", ids.data(), ids.size(), vocab_size);
//   lmcore::io::TokenShard shard = lmcore::io::TokenShard::open("data/train_000000.bin", vocab_size);
//   std::uint32_t first = shard[0];
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace lmcore::io {

namespace detail {
class FileBytes;
}

inline constexpr std::int32_t kTokenShardMagicU16 = 20240520;
inline constexpr std::int32_t kTokenShardVersionU16 = 1;
inline constexpr std::int32_t kTokenShardMagicU32 = 20240801;
inline constexpr std::int32_t kTokenShardVersionU32 = 7;
inline constexpr std::int64_t kTokenShardHeaderInts = 256;
inline constexpr std::int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;

// Writes `count` tokens atomically (temporary file, fsync, rename). uint16 ids (version 1) when
// vocab_size <= 65536, else uint32 (version 7). Throws Error naming the file and the first token that is
// >= vocab_size.
void write_token_shard(const std::string& path, const std::uint32_t* tokens, std::int64_t count,
                       std::int64_t vocab_size);

// A memory-mapped, validated shard. Copies share the mapping.
class TokenShard {
 public:
  // Validates the header (magic, version, count against the file size). With vocab_size > 0 every token
  // is checked to be < vocab_size. Errors name the file and the value found.
  static TokenShard open(const std::string& path, std::int64_t vocab_size = 0);

  const std::string& path() const { return path_; }
  std::int64_t size() const { return count_; }
  int token_bytes() const { return token_bytes_; }  // 2 or 4
  std::uint32_t operator[](std::int64_t i) const;
  // out[0..n) = tokens [begin, begin + n); the range must lie in the shard.
  void read(std::int64_t begin, std::int64_t n, std::int32_t* out) const;

 private:
  std::string path_;
  std::shared_ptr<detail::FileBytes> bytes_;
  const unsigned char* tokens_ = nullptr;
  std::int64_t count_ = 0;
  int token_bytes_ = 2;
};

}  // namespace lmcore::io
