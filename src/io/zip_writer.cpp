#include "src/io/zip_writer.h"

#include "src/io/zip_reader.h"

namespace lmcore::io::detail {

namespace {
constexpr std::uint64_t k32 = 0xFFFFFFFF;
constexpr std::uint16_t kDosTime = 0, kDosDate = (1 << 5) | 1;  // 1980-01-01: reproducible files
}  // namespace

void ZipWriter::add(const std::string& name, const void* data, std::uint64_t size) {
  const std::uint32_t crc = crc32_of({static_cast<const std::byte*>(data), static_cast<std::size_t>(size)});
  const std::uint64_t offset = out_.offset();
  const bool zip64 = force_zip64_ || size >= k32;
  std::string h;
  append_le<std::uint32_t>(h, 0x04034b50);
  append_le<std::uint16_t>(h, zip64 ? 45 : 20);
  append_le<std::uint16_t>(h, 0);  // flags
  append_le<std::uint16_t>(h, 0);  // stored
  append_le<std::uint16_t>(h, kDosTime);
  append_le<std::uint16_t>(h, kDosDate);
  append_le<std::uint32_t>(h, crc);
  append_le<std::uint32_t>(h, zip64 ? static_cast<std::uint32_t>(k32) : static_cast<std::uint32_t>(size));
  append_le<std::uint32_t>(h, zip64 ? static_cast<std::uint32_t>(k32) : static_cast<std::uint32_t>(size));
  append_le<std::uint16_t>(h, static_cast<std::uint16_t>(name.size()));
  std::string extra;
  if (zip64) {
    append_le<std::uint16_t>(extra, 0x0001);
    append_le<std::uint16_t>(extra, 16);
    append_le<std::uint64_t>(extra, size);
    append_le<std::uint64_t>(extra, size);
  }
  // Pad with an unknown extra field ("FB", as PyTorch does) so the data starts 64-byte aligned.
  const std::uint64_t base = offset + h.size() + 2 + name.size() + extra.size();
  std::uint64_t pad = (64 - base % 64) % 64;
  if (pad > 0 && pad < 4) pad += 64;  // an extra field needs 4 header bytes
  if (pad > 0) {
    append_le<std::uint16_t>(extra, 0x4246);
    append_le<std::uint16_t>(extra, static_cast<std::uint16_t>(pad - 4));
    extra.append(pad - 4, 'Z');
  }
  append_le<std::uint16_t>(h, static_cast<std::uint16_t>(extra.size()));
  h += name;
  h += extra;
  out_.write(h);
  if (size) out_.write(data, size);
  records_.push_back({name, crc, size, offset});
}

void ZipWriter::finish() {
  const std::uint64_t cd_offset = out_.offset();
  for (const Record& r : records_) {
    const bool big_size = force_zip64_ || r.size >= k32;
    const bool big_offset = force_zip64_ || r.offset >= k32;
    std::string extra;
    if (big_size || big_offset) {
      append_le<std::uint16_t>(extra, 0x0001);
      append_le<std::uint16_t>(extra, static_cast<std::uint16_t>((big_size ? 16 : 0) + (big_offset ? 8 : 0)));
      if (big_size) {
        append_le<std::uint64_t>(extra, r.size);
        append_le<std::uint64_t>(extra, r.size);
      }
      if (big_offset) append_le<std::uint64_t>(extra, r.offset);
    }
    std::string h;
    append_le<std::uint32_t>(h, 0x02014b50);
    append_le<std::uint16_t>(h, (3 << 8) | 45);  // made by: Unix, spec 4.5
    append_le<std::uint16_t>(h, extra.empty() ? 20 : 45);
    append_le<std::uint16_t>(h, 0);
    append_le<std::uint16_t>(h, 0);
    append_le<std::uint16_t>(h, kDosTime);
    append_le<std::uint16_t>(h, kDosDate);
    append_le<std::uint32_t>(h, r.crc);
    append_le<std::uint32_t>(h, big_size ? static_cast<std::uint32_t>(k32) : static_cast<std::uint32_t>(r.size));
    append_le<std::uint32_t>(h, big_size ? static_cast<std::uint32_t>(k32) : static_cast<std::uint32_t>(r.size));
    append_le<std::uint16_t>(h, static_cast<std::uint16_t>(r.name.size()));
    append_le<std::uint16_t>(h, static_cast<std::uint16_t>(extra.size()));
    append_le<std::uint16_t>(h, 0);  // comment
    append_le<std::uint16_t>(h, 0);  // disk
    append_le<std::uint16_t>(h, 0);  // internal attributes
    append_le<std::uint32_t>(h, 0100644u << 16);  // external: a regular file, rw-r--r--
    append_le<std::uint32_t>(h, big_offset ? static_cast<std::uint32_t>(k32) : static_cast<std::uint32_t>(r.offset));
    h += r.name;
    h += extra;
    out_.write(h);
  }
  const std::uint64_t cd_size = out_.offset() - cd_offset;
  const std::uint64_t count = records_.size();
  const bool zip64 = force_zip64_ || count >= 0xFFFF || cd_offset >= k32 || cd_size >= k32;
  std::string t;
  if (zip64) {
    const std::uint64_t rec = out_.offset();
    append_le<std::uint32_t>(t, 0x06064b50);
    append_le<std::uint64_t>(t, 44);  // size of the rest of the record
    append_le<std::uint16_t>(t, (3 << 8) | 45);
    append_le<std::uint16_t>(t, 45);
    append_le<std::uint32_t>(t, 0);
    append_le<std::uint32_t>(t, 0);
    append_le<std::uint64_t>(t, count);
    append_le<std::uint64_t>(t, count);
    append_le<std::uint64_t>(t, cd_size);
    append_le<std::uint64_t>(t, cd_offset);
    append_le<std::uint32_t>(t, 0x07064b50);
    append_le<std::uint32_t>(t, 0);
    append_le<std::uint64_t>(t, rec);
    append_le<std::uint32_t>(t, 1);
  }
  append_le<std::uint32_t>(t, 0x06054b50);
  append_le<std::uint16_t>(t, 0);
  append_le<std::uint16_t>(t, 0);
  append_le<std::uint16_t>(t, zip64 ? 0xFFFF : static_cast<std::uint16_t>(count));
  append_le<std::uint16_t>(t, zip64 ? 0xFFFF : static_cast<std::uint16_t>(count));
  append_le<std::uint32_t>(t, zip64 ? static_cast<std::uint32_t>(k32) : static_cast<std::uint32_t>(cd_size));
  append_le<std::uint32_t>(t, zip64 ? static_cast<std::uint32_t>(k32) : static_cast<std::uint32_t>(cd_offset));
  append_le<std::uint16_t>(t, 0);
  out_.write(t);
}

}  // namespace lmcore::io::detail
