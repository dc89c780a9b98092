#include "src/io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <filesystem>
#include <mutex>

#include "lmcore/base/file.h"

namespace lmcore::io::detail {

static_assert(std::endian::native == std::endian::little, "lmcore io assumes a little-endian host");

namespace {

// ---- SIGBUS on a mapped file ----------------------------------------------------------------------
// A file truncated or rewritten in place by another program while it is mapped makes the next read of
// a vanished page raise SIGBUS. Recovering from it inside arbitrary kernels is not possible, but the
// process need not die in silence: a handler looks the faulting address up in a table of live mappings
// and, when it is one of lmcore's, writes which file and what to do to stderr. It then restores the
// previous disposition and returns, so the fault repeats and ends as it would have (Python's
// faulthandler, or the default action: death by SIGBUS). A fixed table, so the handler allocates nothing.
constexpr int kMappedSlots = 256;
constexpr std::size_t kMappedPath = 512;
struct MappedSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled or cleared, 2 live
  const std::byte* begin = nullptr;
  std::size_t size = 0;
  char path[kMappedPath] = {};
};
std::array<MappedSlot, kMappedSlots> g_mapped;
struct sigaction g_previous_sigbus {};

void append(char* buf, std::size_t cap, std::size_t& n, const char* s) {
  while (*s && n + 1 < cap) buf[n++] = *s++;
}

void append_u64(char* buf, std::size_t cap, std::size_t& n, std::uint64_t v) {
  char digits[24];
  int k = 0;
  do {
    digits[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (k > 0 && n + 1 < cap) buf[n++] = digits[--k];
}

void on_sigbus(int sig, siginfo_t* info, void* /*context*/) {
  const auto* addr = static_cast<const std::byte*>(info->si_addr);
  for (const MappedSlot& m : g_mapped) {
    if (m.state.load(std::memory_order_acquire) != 2 || addr < m.begin || addr >= m.begin + m.size) continue;
    static char msg[1024 + kMappedPath];
    std::size_t n = 0;
    append(msg, sizeof msg, n, "lmcore: SIGBUS reading byte ");
    append_u64(msg, sizeof msg, n, static_cast<std::uint64_t>(addr - m.begin));
    append(msg, sizeof msg, n, " of the memory mapping of '");
    append(msg, sizeof msg, n, m.path);
    append(msg, sizeof msg, n,
           "': the file was truncated or rewritten in place by another program while its tensors were in use. "
           "Load it with lmcore.load(path, mmap=False) (C++: LoadOptions::mmap = false) to read it into memory "
           "instead, or write checkpoints atomically (lmcore's writers replace the file, which is safe).\n");
    (void)base::write_all(STDERR_FILENO, msg, n);
    break;
  }
  ::sigaction(sig, &g_previous_sigbus, nullptr);
}

void install_sigbus_report() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction mine {};
    mine.sa_sigaction = on_sigbus;
    mine.sa_flags = SA_SIGINFO | SA_NODEFER;  // NODEFER: the repeated fault reaches the restored action
    sigemptyset(&mine.sa_mask);
    ::sigaction(SIGBUS, &mine, &g_previous_sigbus);
  });
}

int register_mapping(const std::byte* begin, std::size_t size, const std::string& path) {
  install_sigbus_report();
  for (int i = 0; i < kMappedSlots; ++i) {
    int expected = 0;
    if (g_mapped[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      g_mapped[i].begin = begin;
      g_mapped[i].size = size;
      const std::size_t k = std::min(path.size(), kMappedPath - 1);
      std::memcpy(g_mapped[i].path, path.data(), k);
      g_mapped[i].path[k] = '\0';
      g_mapped[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;  // more live mappings than slots: those fault without the report
}

void unregister_mapping(int slot) {
  if (slot < 0) return;
  g_mapped[slot].state.store(1, std::memory_order_release);
  g_mapped[slot].state.store(0, std::memory_order_release);
}

// Appended to every failure of a read from a mapped file.
constexpr const char* kMmapHint =
    " (if another program rewrote the file in place, load it with lmcore.load(path, mmap=False) or "
    "LoadOptions::mmap = false)";

}  // namespace

std::shared_ptr<FileBytes> FileBytes::open(const std::string& path, bool use_mmap) {
  // Refuses FIFOs, devices and directories before reading (a FIFO would block the open forever).
  base::UniqueFd fd = base::open_regular_file(path, "load");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("load: cannot stat '{}': {}", path, errno_text(errno));
  std::shared_ptr<FileBytes> f(new FileBytes());
  f->size_ = static_cast<std::size_t>(st.st_size);
  f->path_ = path;
  if (f->size_ == 0) {
    // procfs and sysfs files report a size of 0 and still have contents: say so, rather than call
    // them empty.
    std::byte probe{};
    if (base::read_full(fd.get(), &probe, 1) > 0)
      fail("load: '{}' reports a size of 0 bytes but has contents (a /proc or /sys file, sized only by "
           "reading it); copy it to a regular file first",
           path);
    return f;
  }
  if (use_mmap) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
    if (p != MAP_FAILED) {
      f->fd_ = fd.release();  // kept for read_at() until close_descriptor()
      f->data_ = static_cast<std::byte*>(p);
      f->mapped_ = true;
      f->sigbus_slot_ = register_mapping(f->data_, f->size_, path);
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
  if (n < 0) fail("load: reading '{}' failed at byte {}: {}{}", path_, offset, errno_text(errno), kMmapHint);
  if (static_cast<std::size_t>(n) != out.size())
    fail("load: '{}' ended at byte {}, before the {} bytes it had when opened{}", path_,
         offset + static_cast<std::uint64_t>(n), size_, kMmapHint);
}

void FileBytes::close_descriptor() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

FileBytes::~FileBytes() {
  close_descriptor();
  unregister_mapping(sigbus_slot_);
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
