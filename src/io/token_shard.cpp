#include "lmcore/io/token_shard.h"

#include <cstring>
#include <vector>

#include "lmcore/core/error.h"
#include "src/io/file_util.h"

namespace lmcore::io {

void write_token_shard(const std::string& path, const std::uint32_t* tokens, std::int64_t count,
                       std::int64_t vocab_size) {
  LMCORE_CHECK(count >= 0 && count <= INT32_MAX, "write_token_shard: '{}': token count {} does not fit the header's int32",
               path, count);
  LMCORE_CHECK(vocab_size > 0 && vocab_size <= (std::int64_t{1} << 32),
               "write_token_shard: '{}': vocab_size must be in [1, 2^32], found {}", path, vocab_size);
  for (std::int64_t i = 0; i < count; ++i)
    LMCORE_CHECK(tokens[i] < vocab_size, "write_token_shard: '{}': token {} at position {} is >= vocab_size {}", path,
                 tokens[i], i, vocab_size);
  const bool narrow = vocab_size <= 65536;
  std::int32_t header[kTokenShardHeaderInts] = {};
  header[0] = narrow ? kTokenShardMagicU16 : kTokenShardMagicU32;
  header[1] = narrow ? kTokenShardVersionU16 : kTokenShardVersionU32;
  header[2] = static_cast<std::int32_t>(count);
  detail::AtomicFile out(path, {.what = "save"});
  out.write(header, sizeof(header));
  if (!narrow) {
    out.write(tokens, static_cast<std::size_t>(count) * 4);
  } else {
    std::vector<std::uint16_t> buf(static_cast<std::size_t>(std::min<std::int64_t>(count, 1 << 16)));
    for (std::int64_t i = 0; i < count; i += static_cast<std::int64_t>(buf.size())) {
      const std::int64_t n = std::min<std::int64_t>(count - i, static_cast<std::int64_t>(buf.size()));
      for (std::int64_t j = 0; j < n; ++j) buf[j] = static_cast<std::uint16_t>(tokens[i + j]);
      out.write(buf.data(), static_cast<std::size_t>(n) * 2);
    }
  }
  out.commit();
}

TokenShard TokenShard::open(const std::string& path, std::int64_t vocab_size) {
  TokenShard s;
  s.path_ = path;
  s.bytes_ = detail::FileBytes::open(path, /*use_mmap=*/true);
  const std::size_t size = s.bytes_->size();
  LMCORE_CHECK(size >= kTokenShardHeaderBytes,
               "token shard '{}': file has {} bytes, expected at least the {}-byte header", path, size,
               kTokenShardHeaderBytes);
  const std::byte* p = s.bytes_->data();
  const auto magic = detail::read_le<std::int32_t>(p);
  const auto version = detail::read_le<std::int32_t>(p + 4);
  const auto count = detail::read_le<std::int32_t>(p + 8);
  if (magic == kTokenShardMagicU16) {
    LMCORE_CHECK(version == kTokenShardVersionU16, "token shard '{}': magic {} expects version {}, found {}", path,
                 magic, kTokenShardVersionU16, version);
    s.token_bytes_ = 2;
  } else if (magic == kTokenShardMagicU32) {
    LMCORE_CHECK(version == kTokenShardVersionU32, "token shard '{}': magic {} expects version {}, found {}", path,
                 magic, kTokenShardVersionU32, version);
    s.token_bytes_ = 4;
  } else {
    fail("token shard '{}': wrong magic {}, expected {} (uint16 tokens) or {} (uint32 tokens); first bytes {}", path,
         magic, kTokenShardMagicU16, kTokenShardMagicU32, detail::hex_dump(s.bytes_->bytes()));
  }
  LMCORE_CHECK(count >= 0, "token shard '{}': negative token count {} in the header", path, count);
  const std::uint64_t expected = kTokenShardHeaderBytes + static_cast<std::uint64_t>(count) * s.token_bytes_;
  LMCORE_CHECK(expected == size,
               "token shard '{}': header says {} tokens of {} bytes ({} bytes with the header), the file has {} bytes",
               path, count, s.token_bytes_, expected, size);
  s.count_ = count;
  s.tokens_ = reinterpret_cast<const unsigned char*>(p + kTokenShardHeaderBytes);
  if (vocab_size > 0) {
    for (std::int64_t i = 0; i < s.count_; ++i) {
      const std::uint32_t t = s[i];
      if (t >= vocab_size) fail("token shard '{}': token {} at position {} is >= vocab_size {}", path, t, i, vocab_size);
    }
  }
  s.bytes_->close_descriptor();
  return s;
}

std::uint32_t TokenShard::operator[](std::int64_t i) const {
  if (token_bytes_ == 2) {
    std::uint16_t v;
    std::memcpy(&v, tokens_ + i * 2, 2);
    return v;
  }
  std::uint32_t v;
  std::memcpy(&v, tokens_ + i * 4, 4);
  return v;
}

void TokenShard::read(std::int64_t begin, std::int64_t n, std::int32_t* out) const {
  LMCORE_CHECK(begin >= 0 && n >= 0 && begin <= count_ && n <= count_ - begin,
               "token shard '{}': tokens [{}, {}) lie outside its {} tokens", path_, begin, begin + n, count_);
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>((*this)[begin + i]);
}

}  // namespace lmcore::io
