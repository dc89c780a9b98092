// Private helpers of the io part: read-only file mappings, overflow-checked
// arithmetic and byte dumps for error messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "lmcore/base/atomic_file.h"
#include "lmcore/core/error.h"

namespace lmcore::io::detail {

// The bytes of a file, memory-mapped copy-on-write (MAP_PRIVATE, PROT_READ|PROT_WRITE: tensors that
// view it may be written to without changing the file) or read into an owned buffer. Shared by every
// tensor that views it (Storage::borrow owners).
class FileBytes {
 public:
  static std::shared_ptr<FileBytes> open(const std::string& path, bool use_mmap);
  static std::shared_ptr<FileBytes> copy_of(std::span<const std::byte> bytes);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  bool mapped() const { return mapped_; }

  // Copies bytes [offset, offset + out.size()) of the file into `out`; the range must lie in the file.
  // A mapped file is read with pread() while its descriptor is open, without touching the mapping: the
  // first touch of a page that is not in the page cache makes the kernel read read_ahead_kb around it
  // (often megabytes), whereas pread() reads about what it is asked for. Parsers of small headers use it
  // so that opening a cold file costs the same whatever its size.
  void read_at(std::uint64_t offset, std::span<std::byte> out) const;
  // Closes the descriptor kept for read_at() (the mapping stays); load() calls it once parsed.
  void close_descriptor();

 private:
  FileBytes() = default;
  std::string path_;
  int fd_ = -1;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
  int sigbus_slot_ = -1;  // entry in the table the SIGBUS report reads (file_util.cpp), or -1
  std::unique_ptr<std::byte[]> owned_;
};

// Atomic file writes (temporary file, fsync, rename, directory fsync; non-regular destinations and
// symbolic links refused; temporaries removed on SIGTERM/SIGINT and swept after SIGKILL) are the base
// part's: see lmcore/base/atomic_file.h.
using base::AtomicFile;

// ---- overflow-checked arithmetic: throw Error naming `what` ----
std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what);
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what);

// "3f 00 80 ..." for the first `n` bytes, plus a printable rendering: `89 50 4e 47  ".PNG"`.
std::string hex_dump(std::span<const std::byte> bytes, std::size_t n = 16);

// Little-endian integer from unaligned bytes.
template <typename T>
T read_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;  // lmcore builds only for little-endian hosts (checked in file_util.cpp)
}

template <typename T>
void append_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

}  // namespace lmcore::io::detail
