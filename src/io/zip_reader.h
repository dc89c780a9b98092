// A zip archive reader over bytes in memory (a file mapping), for PyTorch checkpoints and .npz.
//
// Layout (PKWARE APPNOTE 6.3): [local header + data]* [central directory] [ZIP64 end record +
// locator]? [end of central directory (EOCD) + comment]. The central directory is the truth; each
// local header is checked against it. Refused, with an error naming the archive and the entry:
// encryption, methods other than stored (0) and deflate (8), entries whose local and central sizes,
// names or methods disagree, stored entries whose sizes differ, data outside the file or overlapping
// another entry or the central directory, duplicate names, and deflated entries claiming more than
// kMaxDeflateRatio x their compressed size (a zip bomb), or inflating to any size but the declared one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lmcore::io::detail {

// Deflate cannot compress better than about 1032:1; anything claiming more is lying.
inline constexpr std::uint64_t kMaxDeflateRatio = 1032;

struct ZipEntry {
  std::string name;
  std::uint16_t method = 0;  // 0 stored, 8 deflate
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t uncompressed_size = 0;
  std::uint64_t local_offset = 0;  // local header
  std::uint64_t data_offset = 0;   // first byte of the (compressed) data
};

class ZipReader {
 public:
  // Parses and validates the directory. `file` must outlive the reader. The deflated entries together
  // may claim at most `max_inflated_total` uncompressed bytes (load() allows 64 x the file size, at
  // least 64 MiB): more is refused as a zip bomb before anything is inflated.
  ZipReader(std::span<const std::byte> file, std::string name, std::uint64_t max_inflated_total = UINT64_MAX);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view entry_name) const;
  const std::string& name() const { return name_; }

  // Stored entry: its bytes in the file.
  std::span<const std::byte> stored_bytes(const ZipEntry& e) const;
  // Any entry: its uncompressed bytes written to `out` (uncompressed_size bytes). Deflated entries
  // are inflated with the bound above; `verify_crc` also checks the CRC-32.
  void extract_to(const ZipEntry& e, std::byte* out, bool verify_crc) const;
  // Checks a stored entry's bytes in place against the directory's CRC-32 (no copy).
  void verify_stored_crc(const ZipEntry& e) const;
  // A small entry (<= max_bytes) as a string.
  std::string read_string(const ZipEntry& e, std::size_t max_bytes) const;

 private:
  void check_crc(const ZipEntry& e, std::span<const std::byte> bytes) const;
  std::span<const std::byte> file_;
  std::string name_;
  std::vector<ZipEntry> entries_;
};

// CRC-32 (zlib's polynomial) of bytes.
std::uint32_t crc32_of(std::span<const std::byte> bytes, std::uint32_t crc = 0);

}  // namespace lmcore::io::detail
