// lmcore/base/file.h — reading and writing file descriptors without the usual slips: EINTR and short
// transfers retried, special files refused before they can block, descriptors closed on every path.
//
//   base::UniqueFd fd = base::open_regular_file(path, "load");   // throws lmcore::Error
//   std::string text = base::read_file(path, "config");           // whole regular file
//   if (int err = base::write_all(fd.get(), bytes); err != 0) ...  // 0 or the errno
//
// The low-level calls (write_all, read_full, pread_full, read_all) never throw and report errno, so
// that loggers, launchers and signal-time code can use them; the path-level calls throw lmcore::Error
// with messages that name the operation (`what`), the path and the reason.
//
// "Regular files only" is enforced by opening with O_NONBLOCK (opening a FIFO for reading otherwise
// waits for a writer, forever) and checking fstat() on the open descriptor, so a path swapped between
// a check and the open cannot slip through.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace lmcore::base {

// An owned file descriptor, closed by the destructor (-1 = none).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);
  // close(2) with its result: 0, or the errno (a failed close can be a lost write on NFS).
  int close();

 private:
  int fd_ = -1;
};

// ---- descriptor level: never throw -------------------------------------------------------------

// Writes all n bytes, retrying EINTR and short writes. Returns 0, or the errno of the failing write
// (EIO when write(2) returns 0 for a non-empty request).
int write_all(int fd, const void* data, std::size_t n) noexcept;
inline int write_all(int fd, std::string_view s) noexcept { return write_all(fd, s.data(), s.size()); }

// Reads until n bytes or end of file, retrying EINTR. Returns the count read (less than n only at end
// of file), or -1 with errno set.
ssize_t read_full(int fd, void* buf, std::size_t n) noexcept;
// The same with pread(2) at `offset` (the file position is not used or moved).
ssize_t pread_full(int fd, void* buf, std::size_t n, std::uint64_t offset) noexcept;

// Appends everything up to end of file to `out`. Returns 0, the errno of a failing read, or EFBIG when
// more than `limit` bytes would be appended (what was read stays in `out`).
int read_all(int fd, std::string& out, std::size_t limit = std::numeric_limits<std::size_t>::max()) noexcept;

// "a regular file", "a directory", "a FIFO", "a character device", "a block device", "a socket",
// "a symbolic link" (for st_mode values), for messages.
std::string_view file_type_name(mode_t mode);

// fsync(2) of a file or of a directory (so that a rename or a create in it is durable). Returns 0 or
// the errno. A directory that cannot be opened is reported, not ignored.
int fsync_path(const std::string& path, bool directory) noexcept;

// ---- path level: throw lmcore::Error ------------------------------------------------------------

// Opens `path` read-only if it is a regular file, without blocking whatever it is. Errors:
//   "<what>: cannot open 'p': No such file or directory"
//   "<what>: 'p' is a FIFO, not a regular file"
// (`what` names the operation, e.g. "load"; empty leaves the prefix out.)
UniqueFd open_regular_file(const std::string& path, std::string_view what);

// The whole content of the regular file `path`. More than `max_bytes` is an error naming the size.
std::string read_file(const std::string& path, std::string_view what,
                      std::size_t max_bytes = std::numeric_limits<std::size_t>::max());

// mkdir -p: `path` and its missing parents. Errors name the folder and the reason:
//   "<what>: cannot create the folder 'p': Not a directory"
void create_directories(const std::string& path, std::string_view what);

// What makes two paths one file (device and inode): the same under every name, symbolic link and
// hard link, so that a file given twice is found however it is spelled.
struct FileId {
  dev_t device;
  ino_t inode;
  auto operator<=>(const FileId&) const = default;
};
// The file's identity, following symbolic links; nullopt when it cannot be stat'ed (missing, no
// permission): the caller's open reports that.
std::optional<FileId> file_id(const std::string& path) noexcept;

}  // namespace lmcore::base
