// A zip writer for PyTorch checkpoints: stored (uncompressed) entries whose data starts 64-byte
// aligned (padding goes into an extra field, as PyTorch's own writer does), so that readers can map
// tensors zero-copy. ZIP64 records are written when sizes, offsets or the entry count need them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/io/file_util.h"

namespace lmcore::io::detail {

class ZipWriter {
 public:
  // `force_zip64` writes ZIP64 records even for small archives (tests use it).
  explicit ZipWriter(AtomicFile& out, bool force_zip64 = false) : out_(out), force_zip64_(force_zip64) {}
  void add(const std::string& name, const void* data, std::uint64_t size);
  void finish();  // central directory and end records; the caller then commits the file

 private:
  struct Record {
    std::string name;
    std::uint32_t crc;
    std::uint64_t size, offset;
  };
  AtomicFile& out_;
  bool force_zip64_;
  std::vector<Record> records_;
};

}  // namespace lmcore::io::detail
