// The file store: one file per key in a directory every rank can see (one machine, or a shared file
// system). Values are written to a temporary file, closed, then renamed (set) or hard-linked
// (set_if_absent: link(2) fails when the name exists, so exactly one writer wins). add() serialises
// its read-modify-write with flock(2) on a lock file.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lmcore/base/file.h"
#include "src/dist/store_impl.h"

namespace lmcore::dist::detail {

namespace {

// Keys may hold any character; file names get [A-Za-z0-9._-] and %XX for the rest.
std::string encode_key(const std::string& key) {
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  if (out.empty() || out[0] == '.') out = std::string("%") + out;  // no hidden files, "." or ".."
  return out;
}

class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) throw StoreError(fmt::format("file store: cannot create directory '{}': {}", dir_, ec.message()));
  }

  void set(const std::string& key, const std::string& value) override {
    const std::string tmp = write_temp(key, value);
    if (::rename(tmp.c_str(), path(key).c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      throw StoreError(fmt::format("file store {}: rename to key '{}' failed: {}", dir_, key, std::strerror(e)));
    }
  }

  std::optional<std::string> try_get(const std::string& key) override {
    FdGuard fd(::open(path(key).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) return std::nullopt;
      throw StoreError(fmt::format("file store {}: cannot open key '{}': {}", dir_, key, std::strerror(errno)));
    }
    std::string out;
    if (const int e = base::read_all(fd.get(), out); e != 0)
      throw StoreError(fmt::format("file store {}: cannot read key '{}': {}", dir_, key, std::strerror(e)));
    return out;
  }

  bool set_if_absent(const std::string& key, const std::string& value) override {
    const std::string tmp = write_temp(key, value);
    const int rc = ::link(tmp.c_str(), path(key).c_str());
    const int e = errno;
    ::unlink(tmp.c_str());
    if (rc == 0) return true;
    if (e == EEXIST) return false;
    throw StoreError(fmt::format("file store {}: link to key '{}' failed: {}", dir_, key, std::strerror(e)));
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    const std::string lock_path = dir_ + "/%lock";
    FdGuard lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lock.get() < 0) throw StoreError(fmt::format("file store {}: cannot open lock file: {}", dir_, std::strerror(errno)));
    while (::flock(lock.get(), LOCK_EX) != 0) {
      if (errno != EINTR) throw StoreError(fmt::format("file store {}: flock failed: {}", dir_, std::strerror(errno)));
    }
    std::int64_t value = 0;
    if (auto old = try_get(key)) {
      try {
        value = std::stoll(*old);
      } catch (const std::exception&) {
        throw StoreError(fmt::format("file store {}: key '{}' holds '{}', expected an integer", dir_, key, *old));
      }
    }
    value += delta;
    set(key, std::to_string(value));
    return value;  // the lock is released when `lock` closes
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) {
      if (::access(path(k).c_str(), F_OK) != 0) return false;
    }
    return true;
  }

  std::string url() const override { return "file://" + dir_; }

 private:
  std::string path(const std::string& key) const { return dir_ + "/" + encode_key(key); }

  std::string write_temp(const std::string& key, const std::string& value) {
    static std::atomic<std::uint64_t> counter{0};
    const std::string tmp = fmt::format("{}/.tmp.{}.{}", dir_, ::getpid(), counter.fetch_add(1));
    FdGuard fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      throw StoreError(fmt::format("file store {}: cannot write key '{}': {}", dir_, key, std::strerror(errno)));
    }
    if (const int e = base::write_all(fd.get(), value); e != 0) {
      ::unlink(tmp.c_str());
      throw StoreError(fmt::format("file store {}: write of key '{}' failed: {}", dir_, key, std::strerror(e)));
    }
    // No fsync: readers are other processes, which see the page cache (or, on NFS, the data that
    // close() flushed before the rename), and rendezvous keys need not outlive the machine. An fsync
    // behind a busy disk can take seconds, which would hold up the roll call after a failure.
    return tmp;
  }

  std::string dir_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& dir) { return std::make_shared<FileStore>(dir); }

}  // namespace lmcore::dist::detail
