#include "src/io/zip_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "src/io/file_util.h"

namespace lmcore::io::detail {

namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEocdSig = 0x06054b50;
constexpr std::uint32_t kEocd64Sig = 0x06064b50;
constexpr std::uint32_t kEocd64LocatorSig = 0x07064b50;
constexpr std::size_t kEocdSize = 22, kCentralSize = 46, kLocalSize = 30;
constexpr std::size_t kEocd64Size = 56, kLocatorSize = 20;

// Bounds-checked little-endian cursor over the file.
struct Cursor {
  std::span<const std::byte> file;
  const std::string& name;
  template <typename T>
  T at(std::uint64_t offset, const char* what) const {
    if (offset > file.size() || file.size() - offset < sizeof(T))
      fail("{}: zip {} at offset {} runs past the end of the file ({} bytes)", name, what, offset, file.size());
    return read_le<T>(file.data() + offset);
  }
  std::string_view str(std::uint64_t offset, std::uint64_t n, const char* what) const {
    if (offset > file.size() || file.size() - offset < n)
      fail("{}: zip {} at offset {} ({} bytes) runs past the end of the file", name, what, offset, n);
    return {reinterpret_cast<const char*>(file.data()) + offset, static_cast<std::size_t>(n)};
  }
};

// Values of a ZIP64 extended-information extra field (id 0x0001) for the fields that are 0xFFFFFFFF.
void apply_zip64_extra(std::string_view extra, ZipEntry& e, bool want_uncomp, bool want_comp, bool want_offset,
                       const std::string& name) {
  std::size_t i = 0;
  while (i + 4 <= extra.size()) {
    std::uint16_t id, len;
    std::memcpy(&id, extra.data() + i, 2);
    std::memcpy(&len, extra.data() + i + 2, 2);
    if (i + 4 + len > extra.size()) fail("{}: entry '{}': extra field runs past its end", name, e.name);
    if (id == 0x0001) {
      std::size_t k = i + 4;
      const std::size_t end = k + len;
      auto take = [&](std::uint64_t& out, const char* field) {
        if (k + 8 > end) fail("{}: entry '{}': ZIP64 extra field lacks the {}", name, e.name, field);
        std::memcpy(&out, extra.data() + k, 8);
        k += 8;
      };
      if (want_uncomp) take(e.uncompressed_size, "uncompressed size");
      if (want_comp) take(e.compressed_size, "compressed size");
      if (want_offset) take(e.local_offset, "local header offset");
      return;
    }
    i += 4 + len;
  }
  if (want_uncomp || want_comp || want_offset)
    fail("{}: entry '{}' has 0xFFFFFFFF sizes but no ZIP64 extra field", name, e.name);
}

}  // namespace

std::uint32_t crc32_of(std::span<const std::byte> bytes, std::uint32_t crc) {
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t n = bytes.size();
  uLong c = crc;
  while (n > 0) {  // zlib takes uInt lengths
    const uInt k = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    c = ::crc32(c, p, k);
    p += k;
    n -= k;
  }
  return static_cast<std::uint32_t>(c);
}

ZipReader::ZipReader(std::span<const std::byte> file, std::string name, std::uint64_t max_inflated_total)
    : file_(file), name_(std::move(name)) {
  const Cursor cur{file_, name_};
  // 1. Find the end-of-central-directory record: scanning back over at most a 64 KiB comment.
  if (file_.size() < kEocdSize) fail("{}: {} bytes is too short for a zip archive", name_, file_.size());
  std::uint64_t eocd = UINT64_MAX;
  const std::uint64_t lowest = file_.size() >= kEocdSize + 0xFFFF ? file_.size() - kEocdSize - 0xFFFF : 0;
  for (std::uint64_t p = file_.size() - kEocdSize + 1; p-- > lowest;) {
    if (read_le<std::uint32_t>(file_.data() + p) == kEocdSig &&
        p + kEocdSize + read_le<std::uint16_t>(file_.data() + p + 20) == file_.size()) {
      eocd = p;
      break;
    }
  }
  if (eocd == UINT64_MAX) fail("{}: no zip end-of-central-directory record (truncated archive?)", name_);
  const auto disk = cur.at<std::uint16_t>(eocd + 4, "EOCD");
  const auto cd_disk = cur.at<std::uint16_t>(eocd + 6, "EOCD");
  std::uint64_t count = cur.at<std::uint16_t>(eocd + 10, "EOCD");
  std::uint64_t cd_size = cur.at<std::uint32_t>(eocd + 12, "EOCD");
  std::uint64_t cd_offset = cur.at<std::uint32_t>(eocd + 16, "EOCD");
  std::uint64_t cd_end_limit = eocd;  // the directory must end before this
  if (disk != 0 || cd_disk != 0) fail("{}: multi-disk zip archives are not supported", name_);

  // 2. ZIP64: the locator sits just before the EOCD and points at the ZIP64 end record.
  if (eocd >= kLocatorSize && cur.at<std::uint32_t>(eocd - kLocatorSize, "ZIP64 locator") == kEocd64LocatorSig) {
    const std::uint64_t rec = cur.at<std::uint64_t>(eocd - kLocatorSize + 8, "ZIP64 locator");
    if (rec > eocd - kLocatorSize || eocd - kLocatorSize - rec < kEocd64Size)
      fail("{}: ZIP64 end record offset {} is outside the archive", name_, rec);
    if (cur.at<std::uint32_t>(rec, "ZIP64 end record") != kEocd64Sig)
      fail("{}: no ZIP64 end record at offset {}", name_, rec);
    count = cur.at<std::uint64_t>(rec + 32, "ZIP64 end record");
    cd_size = cur.at<std::uint64_t>(rec + 40, "ZIP64 end record");
    cd_offset = cur.at<std::uint64_t>(rec + 48, "ZIP64 end record");
    cd_end_limit = rec;
  } else if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    fail("{}: EOCD fields are saturated but there is no ZIP64 locator", name_);
  }
  if (cd_offset > cd_end_limit || cd_end_limit - cd_offset < cd_size)
    fail("{}: central directory [{}, +{}) lies outside the archive (ends by {})", name_, cd_offset, cd_size, cd_end_limit);
  // Each record is at least 46 bytes: bounds the count before anything is allocated from it.
  if (count > cd_size / kCentralSize)
    fail("{}: EOCD claims {} entries but the central directory has room for at most {}", name_, count,
         cd_size / kCentralSize);

  // 3. Central directory records.
  entries_.reserve(count);
  std::uint64_t p = cd_offset;
  const std::uint64_t cd_end = cd_offset + cd_size;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (cd_end - p < kCentralSize) fail("{}: central directory entry {} runs past the directory", name_, i);
    if (cur.at<std::uint32_t>(p, "central directory entry") != kCentralSig)
      fail("{}: central directory entry {} at offset {} has a bad signature", name_, i, p);
    ZipEntry e;
    const auto flags = cur.at<std::uint16_t>(p + 8, "central entry");
    e.method = cur.at<std::uint16_t>(p + 10, "central entry");
    e.crc32 = cur.at<std::uint32_t>(p + 16, "central entry");
    e.compressed_size = cur.at<std::uint32_t>(p + 20, "central entry");
    e.uncompressed_size = cur.at<std::uint32_t>(p + 24, "central entry");
    const auto name_len = cur.at<std::uint16_t>(p + 28, "central entry");
    const auto extra_len = cur.at<std::uint16_t>(p + 30, "central entry");
    const auto comment_len = cur.at<std::uint16_t>(p + 32, "central entry");
    const auto start_disk = cur.at<std::uint16_t>(p + 34, "central entry");
    e.local_offset = cur.at<std::uint32_t>(p + 42, "central entry");
    const std::uint64_t rec_len = kCentralSize + name_len + extra_len + comment_len;
    if (cd_end - p < rec_len) fail("{}: central directory entry {} runs past the directory", name_, i);
    e.name = std::string(cur.str(p + kCentralSize, name_len, "entry name"));
    const std::string_view extra = cur.str(p + kCentralSize + name_len, extra_len, "extra field");
    apply_zip64_extra(extra, e, e.uncompressed_size == 0xFFFFFFFF, e.compressed_size == 0xFFFFFFFF,
                      e.local_offset == 0xFFFFFFFF, name_);
    if (start_disk != 0 && start_disk != 0xFFFF) fail("{}: entry '{}' is on another disk", name_, e.name);
    if (flags & 1) fail("{}: entry '{}' is encrypted", name_, e.name);
    if (e.method != 0 && e.method != 8)
      fail("{}: entry '{}' uses compression method {}, expected 0 (stored) or 8 (deflate)", name_, e.name, e.method);
    if (e.method == 0 && e.compressed_size != e.uncompressed_size)
      fail("{}: stored entry '{}' claims {} compressed but {} uncompressed bytes", name_, e.name, e.compressed_size,
           e.uncompressed_size);
    if (e.method == 8 && e.uncompressed_size / kMaxDeflateRatio > e.compressed_size + 1)
      fail("{}: entry '{}' claims to inflate {} bytes to {} (more than {}:1): refused as a zip bomb", name_, e.name,
           e.compressed_size, e.uncompressed_size, kMaxDeflateRatio);

    // The local header must agree with the central record.
    const std::uint64_t lh = e.local_offset;
    if (lh > cd_offset || cd_offset - lh < kLocalSize)
      fail("{}: entry '{}' local header offset {} is not before the central directory ({})", name_, e.name, lh, cd_offset);
    if (cur.at<std::uint32_t>(lh, "local header") != kLocalSig)
      fail("{}: entry '{}' has no local header at offset {}", name_, e.name, lh);
    const auto l_flags = cur.at<std::uint16_t>(lh + 6, "local header");
    const auto l_method = cur.at<std::uint16_t>(lh + 8, "local header");
    std::uint64_t l_comp = cur.at<std::uint32_t>(lh + 18, "local header");
    std::uint64_t l_uncomp = cur.at<std::uint32_t>(lh + 22, "local header");
    const auto l_name_len = cur.at<std::uint16_t>(lh + 26, "local header");
    const auto l_extra_len = cur.at<std::uint16_t>(lh + 28, "local header");
    if (cur.str(lh + kLocalSize, l_name_len, "local name") != e.name)
      fail("{}: entry '{}': the local header names '{}'", name_, e.name, cur.str(lh + kLocalSize, l_name_len, "local name"));
    if (l_method != e.method)
      fail("{}: entry '{}': local method {} disagrees with the central directory's {}", name_, e.name, l_method, e.method);
    if (!(l_flags & 8)) {  // without a data descriptor the local sizes must match
      ZipEntry local;
      local.name = e.name;
      local.compressed_size = l_comp;
      local.uncompressed_size = l_uncomp;
      apply_zip64_extra(cur.str(lh + kLocalSize + l_name_len, l_extra_len, "local extra"), local,
                        l_uncomp == 0xFFFFFFFF, l_comp == 0xFFFFFFFF, false, name_);
      if (local.compressed_size != e.compressed_size || local.uncompressed_size != e.uncompressed_size)
        fail("{}: entry '{}': local header sizes ({} compressed, {} uncompressed) disagree with the central "
             "directory ({}, {})",
             name_, e.name, local.compressed_size, local.uncompressed_size, e.compressed_size, e.uncompressed_size);
    }
    e.data_offset = lh + kLocalSize + l_name_len + l_extra_len;
    if (e.data_offset > cd_offset || cd_offset - e.data_offset < e.compressed_size)
      fail("{}: entry '{}' data [{}, +{}) runs into the central directory at {}", name_, e.name, e.data_offset,
           e.compressed_size, cd_offset);
    entries_.push_back(std::move(e));
    p += rec_len;
  }
  std::uint64_t inflated = 0;
  for (const auto& e : entries_)
    if (e.method == 8) inflated = checked_add(inflated, e.uncompressed_size, "zip inflated size");
  if (inflated > max_inflated_total)
    fail("{}: compressed entries would inflate to {} bytes, more than the {} this {}-byte archive allows: refused "
         "as a zip bomb",
         name_, inflated, max_inflated_total, file_.size());
  // Duplicate names would make lookups ambiguous.
  std::vector<const ZipEntry*> by_name;
  for (const auto& e : entries_) by_name.push_back(&e);
  std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < by_name.size(); ++i)
    if (by_name[i]->name == by_name[i - 1]->name) fail("{}: entry '{}' appears twice", name_, by_name[i]->name);
  // Entries must not overlap (overlapping entries are how non-recursive zip bombs reuse one payload).
  std::vector<const ZipEntry*> by_offset = by_name;
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->local_offset < b->local_offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const ZipEntry& prev = *by_offset[i - 1];
    if (by_offset[i]->local_offset < prev.data_offset + prev.compressed_size)
      fail("{}: entries '{}' and '{}' overlap in the archive", name_, prev.name, by_offset[i]->name);
  }
}

const ZipEntry* ZipReader::find(std::string_view entry_name) const {
  for (const auto& e : entries_)
    if (e.name == entry_name) return &e;
  return nullptr;
}

std::span<const std::byte> ZipReader::stored_bytes(const ZipEntry& e) const {
  LMCORE_CHECK(e.method == 0, "{}: entry '{}' is compressed", name_, e.name);
  return file_.subspan(e.data_offset, e.compressed_size);
}

void ZipReader::extract_to(const ZipEntry& e, std::byte* out, bool verify_crc) const {
  if (e.method == 0) {
    const auto src = stored_bytes(e);
    if (!src.empty()) std::memcpy(out, src.data(), src.size());
  } else {
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail("{}: entry '{}': cannot start inflate", name_, e.name);
    std::uint64_t in_done = 0, out_done = 0;
    int rc = Z_OK;
    // One spare output byte detects streams that inflate to more than they declare.
    std::byte spare[1];
    while (rc != Z_STREAM_END) {
      if (z.avail_in == 0) {
        const std::uint64_t k = std::min<std::uint64_t>(e.compressed_size - in_done, 1u << 30);
        z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(file_.data() + e.data_offset + in_done));
        z.avail_in = static_cast<uInt>(k);
        in_done += k;
      }
      if (out_done < e.uncompressed_size) {
        const std::uint64_t k = std::min<std::uint64_t>(e.uncompressed_size - out_done, 1u << 30);
        z.next_out = reinterpret_cast<Bytef*>(out + out_done);
        z.avail_out = static_cast<uInt>(k);
      } else {
        z.next_out = reinterpret_cast<Bytef*>(spare);
        z.avail_out = 1;
      }
      const uInt before_in = z.avail_in, before_out = z.avail_out;
      rc = inflate(&z, Z_NO_FLUSH);
      const std::uint64_t produced = before_out - z.avail_out;
      if (out_done >= e.uncompressed_size && produced > 0) {
        inflateEnd(&z);
        fail("{}: entry '{}' inflates to more than its declared {} bytes (refused)", name_, e.name, e.uncompressed_size);
      }
      out_done += produced;
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        const std::string msg = z.msg ? z.msg : "error";
        inflateEnd(&z);
        fail("{}: entry '{}': corrupt deflate data: {}", name_, e.name, msg);
      }
      if (before_in == z.avail_in && produced == 0 && in_done >= e.compressed_size) {
        inflateEnd(&z);
        fail("{}: entry '{}': deflate data ends early ({} of {} bytes produced)", name_, e.name, out_done,
             e.uncompressed_size);
      }
    }
    inflateEnd(&z);
    if (out_done != e.uncompressed_size)
      fail("{}: entry '{}' inflates to {} bytes, the directory says {}", name_, e.name, out_done, e.uncompressed_size);
  }
  if (verify_crc) check_crc(e, {out, static_cast<std::size_t>(e.uncompressed_size)});
}

void ZipReader::verify_stored_crc(const ZipEntry& e) const { check_crc(e, stored_bytes(e)); }

void ZipReader::check_crc(const ZipEntry& e, std::span<const std::byte> bytes) const {
  const std::uint32_t c = crc32_of(bytes);
  if (c != e.crc32) fail("{}: entry '{}': CRC-32 {:08x} does not match the directory's {:08x}", name_, e.name, c, e.crc32);
}

std::string ZipReader::read_string(const ZipEntry& e, std::size_t max_bytes) const {
  if (e.uncompressed_size > max_bytes)
    fail("{}: entry '{}' is {} bytes, expected at most {}", name_, e.name, e.uncompressed_size, max_bytes);
  std::string s(e.uncompressed_size, '\0');
  extract_to(e, reinterpret_cast<std::byte*>(s.data()), true);
  return s;
}

}  // namespace lmcore::io::detail
