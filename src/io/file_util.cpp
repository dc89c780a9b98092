#include "src/io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <filesystem>

#include "lmcore/base/file.h"

namespace lmcore::io::detail {

static_assert(std::endian::native == std::endian::little, "lmcore io assumes a little-endian host");

std::shared_ptr<FileBytes> FileBytes::open(const std::string& path, bool use_mmap) {
  // Refuses FIFOs, devices and directories before reading (a FIFO would block the open forever).
  base::UniqueFd fd = base::open_regular_file(path, "load");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("load: cannot stat '{}': {}", path, errno_text(errno));
  std::shared_ptr<FileBytes> f(new FileBytes());
  f->size_ = static_cast<std::size_t>(st.st_size);
  f->path_ = path;
  if (f->size_ == 0) return f;
  if (use_mmap) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
    if (p != MAP_FAILED) {
      f->fd_ = fd.release();  // kept for read_at() until close_descriptor()
      f->data_ = static_cast<std::byte*>(p);
      f->mapped_ = true;
      return f;
    }
  }
  // Read the whole file (also the fallback when mmap is refused, e.g. on some special filesystems).
  f->owned_.reset(new (std::align_val_t{64}) std::byte[f->size_]);
  f->data_ = f->owned_.get();
  const ssize_t n = base::read_full(fd.get(), f->data_, f->size_);
  if (n < 0) fail("load: reading '{}' failed: {}", path, errno_text(errno));
  if (static_cast<std::size_t>(n) != f->size_)
    fail("load: '{}' ended at byte {} of the {} it had when opened (is another program rewriting it?)", path, n,
         f->size_);
  return f;
}

std::shared_ptr<FileBytes> FileBytes::copy_of(std::span<const std::byte> bytes) {
  std::shared_ptr<FileBytes> f(new FileBytes());
  f->size_ = bytes.size();
  // 64-byte aligned so that zero-copy views have the alignment a mapping would give.
  f->owned_.reset(new (std::align_val_t{64}) std::byte[bytes.size() + 1]);
  f->data_ = f->owned_.get();
  if (!bytes.empty()) std::memcpy(f->data_, bytes.data(), bytes.size());
  return f;
}

void FileBytes::read_at(std::uint64_t offset, std::span<std::byte> out) const {
  LMCORE_CHECK(offset <= size_ && out.size() <= size_ - offset, "read_at: bytes [{}, +{}) lie outside the {} bytes",
               offset, out.size(), size_);
  if (fd_ < 0) {
    if (!out.empty()) std::memcpy(out.data(), data_ + offset, out.size());
    return;
  }
  const ssize_t n = base::pread_full(fd_, out.data(), out.size(), offset);
  if (n < 0) fail("load: reading '{}' failed at byte {}: {}", path_, offset, errno_text(errno));
  if (static_cast<std::size_t>(n) != out.size())
    fail("load: '{}' ended at byte {}, before the {} bytes it had when opened (is another program rewriting it?)",
         path_, offset + static_cast<std::uint64_t>(n), size_);
}

void FileBytes::close_descriptor() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

FileBytes::~FileBytes() {
  close_descriptor();
  if (mapped_) ::munmap(data_, size_);
  if (owned_) ::operator delete[](owned_.release(), std::align_val_t{64});
}

// ---------------------------------------------------------------------------------------------------

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what) {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail("{}: {} + {} overflows 64 bits", what, a, b);
  return r;
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail("{}: {} x {} overflows 64 bits", what, a, b);
  return r;
}

std::string hex_dump(std::span<const std::byte> bytes, std::size_t n) {
  n = std::min(n, bytes.size());
  std::string hex, text;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    hex += fmt::format("{}{:02x}", i ? " " : "", c);
    text += (c >= 32 && c < 127) ? static_cast<char>(c) : '.';
  }
  return fmt::format("{}  \"{}\"", hex, text);
}

}  // namespace lmcore::io::detail
