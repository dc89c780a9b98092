#include "lmcore/base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <new>

#include "lmcore/base/error.h"

namespace lmcore::base {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int UniqueFd::close() {
  if (fd_ < 0) return 0;
  // Linux releases the descriptor even when close() fails, so it is never retried (EINTR included).
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc == 0 ? 0 : errno;
}

int write_all(int fd, const void* data, std::size_t n) noexcept {
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    done += static_cast<std::size_t>(w);
  }
  return 0;
}

namespace {

// Calls io(offset_into_buf, remaining) until n bytes are done, end of file (0) or an error other than
// EINTR; read_full and pread_full differ only in the call.
template <typename Io>
ssize_t transfer_full(char* p, std::size_t n, Io&& io) noexcept {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = io(p + done, n - done, done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

ssize_t read_full(int fd, void* buf, std::size_t n) noexcept {
  return transfer_full(static_cast<char*>(buf), n,
                       [fd](char* p, std::size_t len, std::size_t) { return ::read(fd, p, len); });
}

ssize_t pread_full(int fd, void* buf, std::size_t n, std::uint64_t offset) noexcept {
  return transfer_full(static_cast<char*>(buf), n, [fd, offset](char* p, std::size_t len, std::size_t done) {
    return ::pread(fd, p, len, static_cast<off_t>(offset + done));
  });
}

int read_all(int fd, std::string& out, std::size_t limit) noexcept {
  try {
    const std::size_t start = out.size();
    // Size the buffer from fstat for regular files (one read), grow geometrically otherwise.
    struct stat st {};
    std::size_t chunk = 65536;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
      chunk = static_cast<std::size_t>(st.st_size) + 1;  // +1 sees end of file in the same pass
    while (true) {
      const std::size_t have = out.size() - start;
      if (have > limit) return EFBIG;
      // One byte past the limit detects a file that is too long (no overflow when limit is SIZE_MAX).
      const std::size_t room = limit - have;
      const std::size_t want = room < chunk ? room + 1 : chunk;
      const std::size_t old = out.size();
      out.resize(old + want);
      const ssize_t r = read_full(fd, out.data() + old, want);
      if (r < 0) {
        const int err = errno;
        out.resize(old);
        return err;
      }
      out.resize(old + static_cast<std::size_t>(r));
      if (out.size() - start > limit) return EFBIG;
      if (static_cast<std::size_t>(r) < want) return 0;
      chunk = std::max<std::size_t>(65536, out.size() - start);
    }
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
}

std::string_view file_type_name(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "a special file";
  }
}

int fsync_path(const std::string& path, bool directory) noexcept {
  const int fd = ::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return errno;
  const int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  // A file system that cannot sync a directory (EINVAL: some FUSE and network file systems) has no
  // stronger guarantee to offer; that is not the caller's failure.
  return rc == EINVAL && directory ? 0 : rc;
}

namespace {
std::string prefix(std::string_view what) { return what.empty() ? std::string() : fmt::format("{}: ", what); }
}  // namespace

UniqueFd open_regular_file(const std::string& path, std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) fail("{}cannot open '{}': {}", prefix(what), path, errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("{}cannot stat '{}': {}", prefix(what), path, errno_text(errno));
  if (!S_ISREG(st.st_mode)) fail("{}'{}' is {}, not a regular file", prefix(what), path, file_type_name(st.st_mode));
  // Back to blocking reads (O_NONBLOCK has no effect on regular files today, but say what is meant).
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) (void)::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_file(const std::string& path, std::string_view what, std::size_t max_bytes) {
  UniqueFd fd = open_regular_file(path, what);
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) > max_bytes)
    fail("{}'{}' is {} bytes, more than the {} allowed", prefix(what), path, st.st_size, max_bytes);
  std::string out;
  const int err = read_all(fd.get(), out, max_bytes);
  if (err == EFBIG) fail("{}'{}' grew past the {} bytes allowed while being read", prefix(what), path, max_bytes);
  if (err != 0) fail("{}reading '{}' failed: {}", prefix(what), path, errno_text(err));
  return out;
}

void create_directories(const std::string& path, std::string_view what) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail("{}cannot create the folder '{}': {}", prefix(what), path, ec.message());
}

std::optional<FileId> file_id(const std::string& path) noexcept {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

}  // namespace lmcore::base
