#include "src/io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <filesystem>

namespace lmcore::io::detail {

static_assert(std::endian::native == std::endian::little, "lmcore io assumes a little-endian host");

namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::shared_ptr<FileBytes> FileBytes::open(const std::string& path, bool use_mmap) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("load: cannot open '{}': {}", path, errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string e = errno_text();
    ::close(fd);
    fail("load: cannot stat '{}': {}", path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("load: '{}' is not a regular file", path);
  }
  std::shared_ptr<FileBytes> f(new FileBytes());
  f->size_ = static_cast<std::size_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return f;
  }
  if (use_mmap) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      f->path_ = path;
      f->fd_ = fd;  // kept for read_at() until close_descriptor()
      f->data_ = static_cast<std::byte*>(p);
      f->mapped_ = true;
      return f;
    }
  }
  // Read the whole file (also the fallback when mmap is refused, e.g. on some special filesystems).
  f->owned_.reset(new (std::align_val_t{64}) std::byte[f->size_]);
  f->data_ = f->owned_.get();
  std::size_t done = 0;
  while (done < f->size_) {
    const ssize_t n = ::read(fd, f->data_ + done, f->size_ - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string e = n < 0 ? errno_text() : "unexpected end of file";
      ::close(fd);
      fail("load: reading '{}' failed at byte {} of {}: {}", path, done, f->size_, e);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
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
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("load: reading '{}' failed at byte {}: {}", path_, offset + done, n < 0 ? errno_text() : "end of file");
    done += static_cast<std::size_t>(n);
  }
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

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = fmt::format("{}.tmp.XXXXXX", path_);
  fd_ = ::mkstemp(temp_path_.data());
  if (fd_ < 0) fail("save: cannot create a temporary file next to '{}': {}", path_, errno_text());
  buffer_.reserve(1 << 20);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::flush() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("save: writing '{}' failed: {}", temp_path_, errno_text());
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void AtomicFile::write(const void* data, std::size_t n) {
  offset_ += n;
  if (buffer_.size() + n > buffer_.capacity()) flush();
  if (n >= buffer_.capacity()) {
    // Large tensors go straight to the file, without the extra copy through the buffer.
    const char* p = static_cast<const char*>(data);
    std::size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("save: writing '{}' failed: {}", temp_path_, errno_text());
      done += static_cast<std::size_t>(w);
    }
    return;
  }
  buffer_.append(static_cast<const char*>(data), n);
}

void AtomicFile::write_zeros(std::size_t n) {
  static const char zeros[4096] = {};
  while (n > 0) {
    const std::size_t k = std::min(n, sizeof(zeros));
    write(zeros, k);
    n -= k;
  }
}

void AtomicFile::commit() {
  flush();
  // mkstemp creates 0600; give the file the permissions a plain create would (0666 & ~umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  if (::fsync(fd_) != 0) fail("save: fsync of '{}' failed: {}", temp_path_, errno_text());
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("save: closing '{}' failed: {}", temp_path_, errno_text());
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail("save: renaming '{}' to '{}' failed: {}", temp_path_, path_, errno_text());
  committed_ = true;
  // The rename is durable only once the directory entry is on disk.
  const std::string parent = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
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
