// llm.c token shards: round trips in both widths, and every malformed file the trainer could be handed.
#include <cstring>

#include "lmcore/io/token_shard.h"
#include "tests/io/io_test_util.h"

namespace lmcore::io {
namespace {

std::string header_bytes(std::int32_t magic, std::int32_t version, std::int32_t count) {
  std::string h(kTokenShardHeaderBytes, '\0');
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 4);
  std::memcpy(h.data() + 8, &count, 4);
  return h;
}

TEST(TokenShard, RoundTripsUint16AndUint32) {
  testing::TempDir dir;
  for (std::int64_t vocab : {std::int64_t{50257}, std::int64_t{65536}, std::int64_t{65537}, std::int64_t{128256}}) {
    std::vector<std::uint32_t> ids;
    for (std::int64_t i = 0; i < 1000; ++i) ids.push_back(static_cast<std::uint32_t>((i * 7919) % vocab));
    ids.push_back(static_cast<std::uint32_t>(vocab - 1));
    const std::string path = dir.file("s.bin");
    write_token_shard(path, ids.data(), static_cast<std::int64_t>(ids.size()), vocab);
    const TokenShard s = TokenShard::open(path, vocab);
    EXPECT_EQ(s.token_bytes(), vocab <= 65536 ? 2 : 4) << vocab;
    ASSERT_EQ(s.size(), static_cast<std::int64_t>(ids.size()));
    const std::string bytes = testing::slurp(path);
    EXPECT_EQ(bytes.size(), static_cast<std::size_t>(kTokenShardHeaderBytes) + ids.size() * s.token_bytes());
    std::vector<std::int32_t> out(ids.size());
    s.read(0, s.size(), out.data());
    for (std::size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(static_cast<std::uint32_t>(out[i]), ids[i]) << i;
  }
}

TEST(TokenShard, EmptyShardIsValid) {
  testing::TempDir dir;
  write_token_shard(dir.file("e.bin"), nullptr, 0, 100);
  EXPECT_EQ(TokenShard::open(dir.file("e.bin")).size(), 0);
}

TEST(TokenShard, WriterRefusesTokensOutsideTheVocabulary) {
  testing::TempDir dir;
  const std::uint32_t ids[] = {1, 2, 300};
  const std::string e = testing::error_of([&] { write_token_shard(dir.file("w.bin"), ids, 3, 300); });
  EXPECT_NE(e.find("token 300 at position 2 is >= vocab_size 300"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.bin")));
}

TEST(TokenShard, MalformedFilesNameTheFileAndTheValue) {
  testing::TempDir dir;
  const std::string path = dir.file("bad.bin");
  auto error_for = [&](const std::string& bytes, std::int64_t vocab = 0) {
    testing::spit(path, bytes);
    return testing::error_of([&] { (void)TokenShard::open(path, vocab); });
  };
  std::string e = error_for("short");
  EXPECT_NE(e.find("bad.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("file has 5 bytes"), std::string::npos) << e;

  e = error_for(header_bytes(12345, 1, 0));
  EXPECT_NE(e.find("wrong magic 12345"), std::string::npos) << e;

  e = error_for(header_bytes(kTokenShardMagicU16, 7, 0));
  EXPECT_NE(e.find("expects version 1, found 7"), std::string::npos) << e;

  // Token count past the file's end (a truncated shard).
  e = error_for(header_bytes(kTokenShardMagicU16, 1, 10) + std::string(8, '\0'));
  EXPECT_NE(e.find("header says 10 tokens of 2 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("the file has 1032 bytes"), std::string::npos) << e;

  // Trailing bytes after the last token are refused too.
  e = error_for(header_bytes(kTokenShardMagicU32, 7, 1) + std::string(5, '\0'));
  EXPECT_NE(e.find("header says 1 tokens of 4 bytes"), std::string::npos) << e;

  e = error_for(header_bytes(kTokenShardMagicU16, 1, -3));
  EXPECT_NE(e.find("negative token count -3"), std::string::npos) << e;

  // A token id >= the model's vocabulary.
  std::string ok = header_bytes(kTokenShardMagicU16, 1, 3);
  const std::uint16_t toks[] = {5, 9, 260};
  ok.append(reinterpret_cast<const char*>(toks), sizeof(toks));
  e = error_for(ok, 256);
  EXPECT_NE(e.find("token 260 at position 2 is >= vocab_size 256"), std::string::npos) << e;
  testing::spit(path, ok);
  EXPECT_EQ(TokenShard::open(path, 261).size(), 3);

  e = testing::error_of([&] { (void)TokenShard::open(dir.file("missing.bin")); });
  EXPECT_NE(e.find("missing.bin"), std::string::npos) << e;
}

TEST(TokenShard, ReadOutsideTheShardIsAnError) {
  testing::TempDir dir;
  const std::uint32_t ids[] = {1, 2, 3};
  write_token_shard(dir.file("r.bin"), ids, 3, 10);
  const TokenShard s = TokenShard::open(dir.file("r.bin"));
  std::int32_t out[4];
  const std::string e = testing::error_of([&] { s.read(1, 3, out); });
  EXPECT_NE(e.find("tokens [1, 4) lie outside its 3 tokens"), std::string::npos) << e;
}

}  // namespace
}  // namespace lmcore::io
