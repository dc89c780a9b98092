#include "lmcore/base/file.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "tests/base/base_test_util.h"

namespace lmcore::base {
namespace {

using testing::error_of;
using testing::run_in_child;
using testing::slurp;
using testing::spit;
using testing::TempDir;

std::atomic<int> g_signals{0};
void count_signal(int) { g_signals.fetch_add(1); }

// While alive, sends SIGUSR1 (installed without SA_RESTART, so a blocked read/write returns EINTR or a
// short count) to `target` every 100 us.
class Pester {
 public:
  explicit Pester(pthread_t target) : target_(target) {
    struct sigaction sa {};
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    ::sigaction(SIGUSR1, &sa, &old_);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        ::pthread_kill(target_, SIGUSR1);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }
  // Stops the signals; called before `target` is joined (a signal to a joined thread is undefined).
  void stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  ~Pester() {
    stop();
    ::sigaction(SIGUSR1, &old_, nullptr);
  }

 private:
  pthread_t target_;
  struct sigaction old_ {};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Waits until `count` more signals have arrived, so each step of a test is interrupted however the
// machine's load stretches the sleeps (a fixed sleep let a loaded run end with too few signals).
void await_signals(int count) {
  const int target = g_signals.load() + count;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (g_signals.load() < target && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 2654435761u) >> 13);
  return s;
}

TEST(WriteAll, DeliversEveryByteThroughInterruptedAndShortWrites) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const std::string payload = pattern(4 << 20);  // far more than the pipe holds: the writer blocks
  g_signals = 0;
  int result = -1;
  std::thread writer([&] {
    result = write_all(p[1], payload);
    ::close(p[1]);
  });
  std::string got;
  {
    Pester pester(writer.native_handle());
    char buf[4096];
    while (true) {
      const ssize_t n = ::read(p[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      ASSERT_GE(n, 0) << std::strerror(errno);
      if (n == 0) break;
      got.append(buf, static_cast<std::size_t>(n));
      // The writer blocks on a full pipe meanwhile. Once every byte is in, it has returned: a signal then
      // reaches no blocked call, and awaiting one would only wait out await_signals' 30 s deadline.
      if (got.size() < payload.size() && got.size() % (256 << 10) < sizeof buf) await_signals(2);
    }
    pester.stop();
    writer.join();
  }
  ::close(p[0]);
  EXPECT_EQ(result, 0) << std::strerror(result);
  EXPECT_GT(g_signals.load(), 10) << "the writer was not interrupted, so the test proved nothing";
  EXPECT_TRUE(got == payload) << "got " << got.size() << " of " << payload.size() << " bytes";
}

TEST(ReadAll, CollectsEveryByteThroughInterruptedReads) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const std::string payload = pattern(2 << 20);
  g_signals = 0;
  std::string got;
  int result = -1;
  std::thread reader([&] { result = read_all(p[0], got); });
  {
    Pester pester(reader.native_handle());
    for (std::size_t off = 0; off < payload.size(); off += 65536) {
      ASSERT_EQ(write_all(p[1], payload.data() + off, std::min<std::size_t>(65536, payload.size() - off)), 0);
      await_signals(2);  // the reader waits on the empty pipe, and is interrupted
    }
    ::close(p[1]);
    pester.stop();
    reader.join();
  }
  ::close(p[0]);
  EXPECT_EQ(result, 0) << std::strerror(result);
  EXPECT_GT(g_signals.load(), 10);
  EXPECT_TRUE(got == payload) << "got " << got.size() << " of " << payload.size() << " bytes";
}

TEST(ReadAll, StopsPastTheLimitWithEfbig) {
  TempDir dir;
  spit(dir.file("f"), std::string(1000, 'x'));
  UniqueFd fd(::open(dir.file("f").c_str(), O_RDONLY));
  std::string out;
  EXPECT_EQ(read_all(fd.get(), out, 999), EFBIG);
  UniqueFd fd2(::open(dir.file("f").c_str(), O_RDONLY));
  out.clear();
  EXPECT_EQ(read_all(fd2.get(), out, 1000), 0);
  EXPECT_EQ(out.size(), 1000u);
}

TEST(ReadFull, ShortOnlyAtEndOfFile) {
  TempDir dir;
  spit(dir.file("f"), "0123456789");
  UniqueFd fd(::open(dir.file("f").c_str(), O_RDONLY));
  char buf[16];
  EXPECT_EQ(read_full(fd.get(), buf, 4), 4);
  EXPECT_EQ(std::string(buf, 4), "0123");
  EXPECT_EQ(read_full(fd.get(), buf, 16), 6);
  EXPECT_EQ(pread_full(fd.get(), buf, 3, 7), 3);
  EXPECT_EQ(std::string(buf, 3), "789");
  EXPECT_EQ(pread_full(fd.get(), buf, 3, 10), 0);
  EXPECT_EQ(read_full(-1, buf, 1), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(WriteAll, ReportsTheErrno) {
  EXPECT_EQ(write_all(-1, "x"), EBADF);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old);
  EXPECT_EQ(write_all(p[1], "x"), EPIPE);
  ::sigaction(SIGPIPE, &old, nullptr);
  ::close(p[1]);
}

TEST(OpenRegularFile, RefusesAFifoWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A plain open() for reading waits for a writer that never comes; run it where a hang can be seen.
  const int status = run_in_child(
      [&] {
        const std::string msg = error_of([&] { open_regular_file(fifo, "load"); });
        if (msg != "load: '" + fifo + "' is a FIFO, not a regular file") ::_exit(2);
      },
      std::chrono::seconds(10));
  ASSERT_NE(status, -1) << "open_regular_file blocked on a FIFO";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(OpenRegularFile, NamesWhatItFound) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { open_regular_file(dir.path(), "load"); }),
            "load: '" + dir.path() + "' is a directory, not a regular file");
  EXPECT_EQ(error_of([&] { open_regular_file("/dev/null", ""); }), "'/dev/null' is a character device, not a regular file");
  EXPECT_EQ(error_of([&] { open_regular_file(dir.file("missing"), "load"); }),
            "load: cannot open '" + dir.file("missing") + "': No such file or directory");
  const std::string sock = dir.file("sock");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  // A socket cannot be opened at all (ENXIO); the message still names the path.
  EXPECT_NE(error_of([&] { open_regular_file(sock, "load"); }).find(sock), std::string::npos);
  ::close(s);
  spit(dir.file("ok"), "abc");
  UniqueFd fd = open_regular_file(dir.file("ok"), "load");
  EXPECT_TRUE(fd);
  EXPECT_EQ(::fcntl(fd.get(), F_GETFL) & O_NONBLOCK, 0);
}

TEST(ReadFile, ReadsAndBoundsTheSize) {
  TempDir dir;
  spit(dir.file("f"), std::string(100, 'a'));
  EXPECT_EQ(read_file(dir.file("f"), "config"), std::string(100, 'a'));
  EXPECT_EQ(read_file(dir.file("f"), "config", 100).size(), 100u);
  EXPECT_EQ(error_of([&] { read_file(dir.file("f"), "config", 99); }),
            "config: '" + dir.file("f") + "' is 100 bytes, more than the 99 allowed");
  spit(dir.file("empty"), "");
  EXPECT_EQ(read_file(dir.file("empty"), "config"), "");
}

TEST(FileTypeName, CoversEveryType) {
  EXPECT_EQ(file_type_name(S_IFREG | 0644), "a regular file");
  EXPECT_EQ(file_type_name(S_IFDIR), "a directory");
  EXPECT_EQ(file_type_name(S_IFIFO), "a FIFO");
  EXPECT_EQ(file_type_name(S_IFCHR), "a character device");
  EXPECT_EQ(file_type_name(S_IFBLK), "a block device");
  EXPECT_EQ(file_type_name(S_IFSOCK), "a socket");
  EXPECT_EQ(file_type_name(S_IFLNK), "a symbolic link");
}

TEST(CreateDirectories, MakesTheParentsAndNamesTheFolderItCannotMake) {
  TempDir dir;
  const std::string deep = dir.file("a/b/c");
  create_directories(deep, "run folder");
  EXPECT_TRUE(std::filesystem::is_directory(deep));
  create_directories(deep, "run folder");  // already there: fine
  spit(dir.file("file"), "x");
  EXPECT_EQ(error_of([&] { create_directories(dir.file("file/sub"), "run folder"); }),
            "run folder: cannot create the folder '" + dir.file("file/sub") + "': Not a directory");
  EXPECT_EQ(error_of([&] { create_directories(dir.file("file"), ""); }),
            "cannot create the folder '" + dir.file("file") + "': Not a directory");
}

TEST(FileId, IsTheSameUnderEveryNameOfOneFile) {
  TempDir dir;
  spit(dir.file("a"), "x");
  spit(dir.file("b"), "x");  // same bytes, another file
  ASSERT_EQ(::link(dir.file("a").c_str(), dir.file("hard").c_str()), 0);
  ASSERT_EQ(::symlink(dir.file("a").c_str(), dir.file("soft").c_str()), 0);
  const auto a = file_id(dir.file("a"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(file_id(dir.file("hard")), a);
  EXPECT_EQ(file_id(dir.file("soft")), a);
  EXPECT_EQ(file_id(dir.path() + "/./a"), a);
  EXPECT_NE(file_id(dir.file("b")), a);
  EXPECT_FALSE(file_id(dir.file("missing")).has_value());
}

TEST(FsyncPath, ReportsAMissingPath) {
  TempDir dir;
  EXPECT_EQ(fsync_path(dir.path(), true), 0);
  EXPECT_EQ(fsync_path(dir.file("missing"), true), ENOENT);
  spit(dir.file("f"), "x");
  EXPECT_EQ(fsync_path(dir.file("f"), false), 0);
  EXPECT_EQ(fsync_path(dir.file("f"), true), ENOTDIR);
}

TEST(UniqueFd, ClosesOnceAndMoves) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  {
    UniqueFd a(p[0]);
    UniqueFd b(std::move(a));
    EXPECT_EQ(a.get(), -1);
    EXPECT_EQ(b.get(), p[0]);
    EXPECT_EQ(b.close(), 0);
    EXPECT_EQ(b.close(), 0);  // nothing left to close
  }
  EXPECT_EQ(::fcntl(p[0], F_GETFD), -1);
  UniqueFd c(p[1]);
}

}  // namespace
}  // namespace lmcore::base
