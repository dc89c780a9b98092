// AtomicFile: the sequence and the litter rules are documented in lmcore/base/atomic_file.h.
#include "lmcore/base/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

#include "lmcore/base/error.h"
#include "lmcore/base/file.h"

namespace lmcore::base {

namespace {

constexpr std::size_t kBufferBytes = 1 << 20;
// A temporary whose writer may still be between create and flock, or lives on another host of a shared
// file system, is left alone for this long.
constexpr auto kStaleAge = std::chrono::seconds(60);
constexpr int kSuffixLen = 6;

std::string prefix(std::string_view what) { return what.empty() ? std::string() : fmt::format("{}: ", what); }

// ---- signal-time cleanup -------------------------------------------------------------------------
// A fixed table, so the handler touches no allocator and no lock: a slot is claimed (0 -> 1), filled,
// published (-> 2); the handler unlinks published slots; release goes 2 -> 1 -> 0. A process with more
// live temporaries than slots leaves the extra ones to the sweep.
constexpr int kSlots = 64;
constexpr std::size_t kSlotPath = 4096;
struct Slot {
  std::atomic<int> state{0};
  char path[kSlotPath];
};
std::array<Slot, kSlots> g_slots;

constexpr std::array<int, 2> kSignals = {SIGTERM, SIGINT};

void on_fatal_signal(int sig) {
  const int saved_errno = errno;
  for (Slot& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  }
  // Die of the same signal, as the default action would have: restore it; the signal is blocked
  // while this handler runs, so the raise() is delivered as soon as the handler returns.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
  errno = saved_errno;
}

// Installs the handler for the signals still at their default action; a program that chose its own
// handling (Python's SIGINT -> KeyboardInterrupt, the trainer's SIGTERM -> checkpoint) keeps it, and
// the temporaries are then removed by the destructors as the program unwinds.
void install_signal_cleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kSignals) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
      if ((current.sa_flags & SA_SIGINFO) != 0) continue;
      struct sigaction mine {};
      mine.sa_handler = on_fatal_signal;
      sigemptyset(&mine.sa_mask);
      for (int s : kSignals) sigaddset(&mine.sa_mask, s);  // one cleanup at a time
      ::sigaction(sig, &mine, nullptr);
    }
  });
}

int claim_slot(const std::string& path) {
  if (path.size() >= kSlotPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void release_slot(int& slot) {
  if (slot < 0) return;
  g_slots[slot].state.store(1, std::memory_order_release);
  g_slots[slot].state.store(0, std::memory_order_release);
  slot = -1;
}

// ---- names ---------------------------------------------------------------------------------------

struct SplitPath {
  std::string dir;   // "." when the path has no directory part
  std::string name;  // last component
};

SplitPath split(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string dir = p.parent_path().string();
  return SplitPath{dir.empty() ? std::string(".") : dir, p.filename().string()};
}

std::string random_suffix() {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    const auto t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ t ^ static_cast<std::uint64_t>(::getpid());
  }());
  std::string s(kSuffixLen, 'x');
  for (char& c : s) c = kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

// Parses "<pid>.<6 alphanumerics>" (what follows "<name>.tmp."); returns the pid or -1.
long parse_temp_tail(std::string_view tail) {
  const auto dot = tail.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 10) return -1;
  long pid = 0;
  for (char c : tail.substr(0, dot)) {
    if (c < '0' || c > '9') return -1;
    pid = pid * 10 + (c - '0');
  }
  const std::string_view suffix = tail.substr(dot + 1);
  if (suffix.size() != kSuffixLen) return -1;
  for (char c : suffix) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return -1;
  }
  return pid;
}

}  // namespace

void check_replaceable(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    fail("{}cannot check '{}': {}", prefix(what), path, errno_text(errno));
  }
  if (S_ISREG(st.st_mode)) return;
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(path, ec).string();
    fail("{}'{}' is a symbolic link (to '{}'); lmcore does not write through links: pass the target's path, "
         "or remove the link",
         prefix(what), path, ec ? std::string("?") : target);
  }
  fail("{}'{}' is {}, not a regular file; refusing to replace it", prefix(what), path, file_type_name(st.st_mode));
}

void check_can_create(const std::string& path, std::string_view what) {
  check_replaceable(path, what);
  const std::string dir = split(path).dir;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    fail("{}cannot write '{}': its directory '{}': {}", prefix(what), path, dir, errno_text(errno));
  if (!S_ISDIR(st.st_mode))
    fail("{}cannot write '{}': '{}' is {}, not a directory", prefix(what), path, dir, file_type_name(st.st_mode));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("{}cannot write '{}': its directory '{}': {}", prefix(what), path, dir, errno_text(errno));
}

std::size_t sweep_stale_temporaries(const std::string& path) {
  const SplitPath sp = split(path);
  const std::string head = fmt::format("{}.tmp.", sp.name);
  DIR* d = ::opendir(sp.dir.c_str());
  if (d == nullptr) return 0;
  std::size_t removed = 0;
  const auto now = std::chrono::system_clock::now();
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n.size() <= head.size() || n.substr(0, head.size()) != head) continue;
    const long pid = parse_temp_tail(n.substr(head.size()));
    if (pid <= 0) continue;
    const std::string full = fmt::format("{}/{}", sp.dir, n);
    struct stat before {};
    if (::lstat(full.c_str(), &before) != 0 || !S_ISREG(before.st_mode) || before.st_uid != ::geteuid()) continue;
    UniqueFd fd(::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd) continue;
    // A live writer holds LOCK_EX until it commits or is destroyed; a dead one's lock died with it.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    struct stat held {};
    if (::fstat(fd.get(), &held) != 0 || held.st_ino != before.st_ino || held.st_dev != before.st_dev) continue;
    const bool pid_gone = ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    const auto mtime = std::chrono::system_clock::from_time_t(held.st_mtim.tv_sec);
    if (pid_gone || now - mtime > kStaleAge) {
      if (::unlink(full.c_str()) == 0) ++removed;
    }
  }
  ::closedir(d);
  return removed;
}

AtomicFile::AtomicFile(std::string path, AtomicFileOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  const std::string& what = options_.what;
  LMCORE_CHECK(!path_.empty(), "{}empty destination path", prefix(what));
  check_replaceable(path_, what);
  install_signal_cleanup();
  sweep_stale_temporaries(path_);

  mode_t mode = 0666;
  if (options_.keep_mode) {
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0) mode = st.st_mode & 07777;
  }
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temp_path_ = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), random_suffix());
    // The name is published to the signal handler before the file exists: a SIGTERM that lands
    // between the two then finds it (unlinking a name not yet created is harmless), where one that
    // landed between open() and a later claim left the temporary behind. The name holds this pid, so
    // the handler can only ever remove this process's own files.
    slot_ = claim_slot(temp_path_);
    fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd_ < 0) {
      const int err = errno;
      release_slot(slot_);
      if (err != EEXIST || attempt == 100) {
        temp_path_.clear();
        fail("{}cannot create a temporary file next to '{}': {}", prefix(what), path_, errno_text(err));
      }
    }
  }
  // Held until the descriptor closes: tells sweepers this temporary has a live writer. A file system
  // without flock makes the sweeper's attempt fail too, so nothing live is ever swept.
  (void)::flock(fd_, LOCK_EX | LOCK_NB);
  if (options_.keep_mode) (void)::fchmod(fd_, mode);  // exactly the old bits, whatever the umask
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  release_slot(slot_);
}

void AtomicFile::write_direct(const void* data, std::size_t n) {
  if (const int err = write_all(fd_, data, n); err != 0)
    fail("{}writing '{}' failed: {}", prefix(options_.what), temp_path_, errno_text(err));
}

void AtomicFile::flush() {
  write_direct(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write(const void* data, std::size_t n) {
  LMCORE_ASSERT(fd_ >= 0 && !committed_);
  offset_ += n;
  if (buffer_.capacity() < kBufferBytes) buffer_.reserve(kBufferBytes);
  if (buffer_.size() + n > buffer_.capacity()) flush();
  if (n >= buffer_.capacity()) {
    write_direct(data, n);  // large blocks skip the copy through the buffer
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
  LMCORE_ASSERT(fd_ >= 0 && !committed_);
  const std::string p = prefix(options_.what);
  flush();
  if (options_.durable && ::fsync(fd_) != 0) fail("{}fsync of '{}' failed: {}", p, temp_path_, errno_text(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("{}closing '{}' failed: {}", p, temp_path_, errno_text(errno));
  // The destination may have changed since the constructor looked (a FIFO made meanwhile).
  check_replaceable(path_, options_.what);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail("{}renaming '{}' to '{}' failed: {}", p, temp_path_, path_, errno_text(errno));
  committed_ = true;
  release_slot(slot_);
  if (options_.durable) {
    // The rename is durable only once the directory entry is on disk.
    const std::string dir = split(path_).dir;
    if (const int err = fsync_path(dir, true); err != 0)
      fail("{}'{}' is written, but the fsync of its directory '{}' failed: {}", p, path_, dir, errno_text(err));
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes, AtomicFileOptions options) {
  AtomicFile f(path, std::move(options));
  f.write(bytes);
  f.commit();
}

}  // namespace lmcore::base
