// The zip reader and writer: round trips (plain and ZIP64), alignment, deflate, and the archives it
// must refuse: lying sizes, overlapping entries, zip bombs, truncation, bad directories.
#include <zlib.h>

#include "src/io/zip_reader.h"
#include "src/io/zip_writer.h"
#include "tests/io/io_test_util.h"

namespace lmcore::io::detail {
namespace {

using namespace std::string_literals;

using lmcore::io::testing::as_bytes;

std::string write_zip(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64 = false) {
  lmcore::io::testing::TempDir dir;
  const std::string path = dir.file("z.zip");
  {
    AtomicFile out(path);
    ZipWriter w(out, zip64);
    for (const auto& [name, data] : entries) w.add(name, data.data(), data.size());
    w.finish();
    out.commit();
  }
  return lmcore::io::testing::slurp(path);
}

std::string raw_deflate(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A one-entry deflated archive, built by hand: `declared` is the uncompressed size the headers claim.
std::string deflated_zip(const std::string& name, const std::string& data, std::uint64_t declared) {
  const std::string comp = raw_deflate(data);
  const std::uint32_t crc = crc32_of(as_bytes(data));
  std::string z;
  append_le<std::uint32_t>(z, 0x04034b50);
  append_le<std::uint16_t>(z, 20);
  append_le<std::uint16_t>(z, 0);
  append_le<std::uint16_t>(z, 8);
  append_le<std::uint32_t>(z, 0);
  append_le<std::uint32_t>(z, crc);
  append_le<std::uint32_t>(z, static_cast<std::uint32_t>(comp.size()));
  append_le<std::uint32_t>(z, static_cast<std::uint32_t>(declared));
  append_le<std::uint16_t>(z, static_cast<std::uint16_t>(name.size()));
  append_le<std::uint16_t>(z, 0);
  z += name;
  z += comp;
  const std::uint32_t cd = static_cast<std::uint32_t>(z.size());
  append_le<std::uint32_t>(z, 0x02014b50);
  append_le<std::uint16_t>(z, 20);
  append_le<std::uint16_t>(z, 20);
  append_le<std::uint16_t>(z, 0);
  append_le<std::uint16_t>(z, 8);
  append_le<std::uint32_t>(z, 0);
  append_le<std::uint32_t>(z, crc);
  append_le<std::uint32_t>(z, static_cast<std::uint32_t>(comp.size()));
  append_le<std::uint32_t>(z, static_cast<std::uint32_t>(declared));
  append_le<std::uint16_t>(z, static_cast<std::uint16_t>(name.size()));
  for (int i = 0; i < 4; ++i) append_le<std::uint16_t>(z, 0);
  append_le<std::uint32_t>(z, 0);
  append_le<std::uint32_t>(z, 0);
  z += name;
  const std::uint32_t cd_size = static_cast<std::uint32_t>(z.size()) - cd;
  append_le<std::uint32_t>(z, 0x06054b50);
  append_le<std::uint32_t>(z, 0);
  append_le<std::uint16_t>(z, 1);
  append_le<std::uint16_t>(z, 1);
  append_le<std::uint32_t>(z, cd_size);
  append_le<std::uint32_t>(z, cd);
  append_le<std::uint16_t>(z, 0);
  return z;
}

std::string reader_error(const std::string& bytes) {
  return lmcore::io::testing::error_of([&] {
    ZipReader r(as_bytes(bytes), "z.zip");
    for (const auto& e : r.entries()) {
      std::vector<std::byte> out(e.uncompressed_size);
      r.extract_to(e, out.data(), true);
    }
  });
}

TEST(Zip, RoundTripAlignedStoredEntries) {
  for (bool zip64 : {false, true}) {
    const std::string bytes = write_zip({{"archive/data.pkl", "pickle"}, {"archive/data/0", std::string(1000, 'x')},
                                         {"archive/empty", ""}, {"archive/version", "3\n"}},
                                        zip64);
    ZipReader r(as_bytes(bytes), "z");
    ASSERT_EQ(r.entries().size(), 4u);
    const ZipEntry* e = r.find("archive/data/0");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->data_offset % 64, 0u) << "zip64=" << zip64;
    EXPECT_EQ(e->uncompressed_size, 1000u);
    EXPECT_EQ(r.read_string(*r.find("archive/version"), 16), "3\n");
    EXPECT_EQ(r.read_string(*r.find("archive/empty"), 16), "");
    EXPECT_EQ(r.stored_bytes(*e).size(), 1000u);
  }
}

TEST(Zip, Zip64RecordsAreWrittenAndRead) {
  const std::string bytes = write_zip({{"a", "hello"}}, true);
  // The ZIP64 end record and locator precede the EOCD, whose fields are saturated.
  EXPECT_NE(bytes.find(std::string("PK\x06\x06", 4)), std::string::npos);
  EXPECT_NE(bytes.find(std::string("PK\x06\x07", 4)), std::string::npos);
  ZipReader r(as_bytes(bytes), "z");
  EXPECT_EQ(r.read_string(*r.find("a"), 16), "hello");
}

TEST(Zip, InflatesDeflatedEntries) {
  std::string data;
  for (int i = 0; i < 5000; ++i) data += std::to_string(i * i);
  const std::string bytes = deflated_zip("d.npy", data, data.size());
  ZipReader r(as_bytes(bytes), "z");
  EXPECT_EQ(r.read_string(r.entries()[0], 1 << 20), data);
}

TEST(ZipMalformed, LyingUncompressedSizeIsRefused) {
  const std::string data(10000, 'a');
  // Claims fewer bytes than the stream inflates to.
  EXPECT_NE(reader_error(deflated_zip("d", data, 5000)).find("inflates to more than its declared 5000 bytes"),
            std::string::npos);
  // Claims more bytes than the stream holds.
  EXPECT_NE(reader_error(deflated_zip("d", data, 10007)).find("inflates to 10000 bytes, the directory says 10007"),
            std::string::npos)
      << reader_error(deflated_zip("d", data, 10007));
}

TEST(ZipMalformed, ZipBombIsRefused) {
  // 1032:1 is deflate's limit: a claim beyond it is refused before anything is allocated.
  const std::string bytes = deflated_zip("bomb", std::string(1000, '\0'), 4'000'000'000ull);
  EXPECT_NE(reader_error(bytes).find("refused as a zip bomb"), std::string::npos) << reader_error(bytes);
}

TEST(ZipMalformed, LocalAndCentralSizesDisagree) {
  std::string bytes = write_zip({{"a", "hello world"}});
  // Local header compressed size at offset 18: make it lie.
  bytes[18] = 3;
  EXPECT_NE(reader_error(bytes).find("local header sizes (3 compressed"), std::string::npos) << reader_error(bytes);
}

TEST(ZipMalformed, StoredEntryWithDifferentSizes) {
  std::string bytes = write_zip({{"a", "hello world"}});
  const auto cd = bytes.find(std::string("PK\x01\x02", 4));
  bytes[cd + 24] = 12;  // central uncompressed size 12, compressed 11
  EXPECT_NE(reader_error(bytes).find("stored entry 'a' claims 11 compressed but 12 uncompressed"), std::string::npos)
      << reader_error(bytes);
}

TEST(ZipMalformed, EntryRunningIntoTheDirectory) {
  std::string bytes = write_zip({{"a", "hello world"}});
  const auto cd = bytes.find(std::string("PK\x01\x02", 4));
  bytes[cd + 20] = bytes[cd + 24] = 100;  // both sizes 100 in the directory
  bytes[18] = bytes[22] = 100;            // and in the local header
  EXPECT_NE(reader_error(bytes).find("runs into the central directory"), std::string::npos) << reader_error(bytes);
}

TEST(ZipMalformed, OverlappingEntries) {
  // Entry 'b' is hidden inside entry 'a''s data (the non-recursive zip bomb trick reuses bytes so).
  const std::string zb = write_zip({{"b", "xyz"}});
  const auto cdb = zb.find("PK\x01\x02"s);
  const std::string local_b = zb.substr(0, cdb);
  const std::string rec_b = zb.substr(cdb, zb.find("PK\x05\x06"s) - cdb);
  const std::string za = write_zip({{"a", local_b}});
  const std::uint32_t inner = static_cast<std::uint32_t>(ZipReader(as_bytes(za), "a").entries()[0].data_offset);
  const auto eocd = za.find("PK\x05\x06"s);
  std::string rec = rec_b;
  std::memcpy(rec.data() + 42, &inner, 4);
  std::string tail = za.substr(eocd);
  tail[8] = tail[10] = 2;
  std::uint32_t cd_size;
  std::memcpy(&cd_size, tail.data() + 12, 4);
  cd_size += static_cast<std::uint32_t>(rec.size());
  std::memcpy(tail.data() + 12, &cd_size, 4);
  const std::string two = za.substr(0, eocd) + rec + tail;
  EXPECT_NE(reader_error(two).find("entries 'a' and 'b' overlap"), std::string::npos) << reader_error(two);
}

TEST(ZipMalformed, DuplicateNames) {
  const std::string bytes = write_zip({{"a", "1"}, {"a", "2"}});
  EXPECT_NE(reader_error(bytes).find("entry 'a' appears twice"), std::string::npos);
}

TEST(ZipMalformed, CountLargerThanDirectory) {
  std::string bytes = write_zip({{"a", "1"}});
  const auto eocd = bytes.find(std::string("PK\x05\x06", 4));
  bytes[eocd + 10] = bytes[eocd + 8] = static_cast<char>(200);
  EXPECT_NE(reader_error(bytes).find("claims 200 entries"), std::string::npos) << reader_error(bytes);
}

TEST(ZipMalformed, BadCrcIsDetected) {
  std::string bytes = write_zip({{"a", "hello"}});
  const auto cd = bytes.find(std::string("PK\x01\x02", 4));
  bytes[cd + 16] ^= 1;
  bytes[14] ^= 1;
  EXPECT_NE(reader_error(bytes).find("CRC-32"), std::string::npos);
}

TEST(ZipMalformed, TruncationAtEveryByte) {
  const std::string good = write_zip({{"archive/data.pkl", "abc"}, {"archive/data/0", std::string(100, 'z')}}, true);
  for (std::size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(reader_error(good.substr(0, n)).empty()) << n;
}

TEST(ZipMalformed, Encrypted) {
  std::string bytes = write_zip({{"a", "hello"}});
  const auto cd = bytes.find(std::string("PK\x01\x02", 4));
  bytes[cd + 8] = 1;
  EXPECT_NE(reader_error(bytes).find("encrypted"), std::string::npos);
}

}  // namespace
}  // namespace lmcore::io::detail
