#include "lmcore/base/atomic_file.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <csignal>
#include <cstring>
#include <stdexcept>

#include "lmcore/base/file.h"
#include "tests/base/base_test_util.h"

namespace lmcore::base {
namespace {

using testing::error_of;
using testing::slurp;
using testing::spit;
using testing::TempDir;

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return st.st_mode & 07777;
}

TEST(AtomicFile, CreatesAndReplacesLeavingNoTemporary) {
  TempDir dir;
  const std::string dest = dir.file("out.bin");
  write_file_atomically(dest, "first");
  EXPECT_EQ(slurp(dest), "first");
  {
    AtomicFile f(dest, {.what = "save"});
    f.write("sec");
    f.write(std::string(3 << 20, 'z'));  // past the buffer: the direct path
    f.write_zeros(5);
    f.write("ond");
    EXPECT_EQ(f.offset(), 3u + (3u << 20) + 5u + 3u);
    EXPECT_EQ(slurp(dest), "first");  // nothing visible before commit
    f.commit();
  }
  EXPECT_EQ(slurp(dest), "sec" + std::string(3 << 20, 'z') + std::string(5, '\0') + "ond");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, WithoutCommitTheDestinationIsUntouchedAndTheTemporaryGone) {
  TempDir dir;
  const std::string dest = dir.file("out.bin");
  spit(dest, "old");
  {
    AtomicFile f(dest);
    f.write(std::string(100, 'n'));
    EXPECT_EQ(dir.names().size(), 2u);  // the temporary exists meanwhile
    EXPECT_EQ(f.temp_path().rfind(dest + ".tmp." + std::to_string(::getpid()) + ".", 0), 0u) << f.temp_path();
  }
  EXPECT_EQ(slurp(dest), "old");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, ModeIsAPlainCreateOrKeptOnRequest) {
  TempDir dir;
  const mode_t mask = ::umask(022);
  write_file_atomically(dir.file("a"), "x");
  EXPECT_EQ(mode_of(dir.file("a")), 0644u);
  spit(dir.file("script.py"), "print(1)\n");
  ::chmod(dir.file("script.py").c_str(), 0751);
  write_file_atomically(dir.file("script.py"), "print(2)\n", {.keep_mode = true});
  EXPECT_EQ(mode_of(dir.file("script.py")), 0751u);
  write_file_atomically(dir.file("script.py"), "print(3)\n");
  EXPECT_EQ(mode_of(dir.file("script.py")), 0644u);
  ::umask(mask);
}

// Defect 4 of issue 13: `lmcore convert IN OUT` replaced a FIFO, a device or a symlink at OUT with a
// regular file. Every non-regular destination is refused before anything is created.
TEST(AtomicFile, RefusesNonRegularDestinations) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { write_file_atomically(fifo, "x", {.what = "convert"}); }),
            "convert: '" + fifo + "' is a FIFO, not a regular file; refusing to replace it");

  const std::string sub = dir.file("sub");
  std::filesystem::create_directory(sub);
  EXPECT_EQ(error_of([&] { write_file_atomically(sub, "x", {.what = "save"}); }),
            "save: '" + sub + "' is a directory, not a regular file; refusing to replace it");

  const std::string sock = dir.file("sock");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(error_of([&] { write_file_atomically(sock, "x", {.what = "save"}); }),
            "save: '" + sock + "' is a socket, not a regular file; refusing to replace it");
  ::close(s);

  // A character device made here rather than /dev/null, so that a regression cannot damage the system.
  const std::string dev = dir.file("null");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    EXPECT_EQ(error_of([&] { write_file_atomically(dev, "x", {.what = "save"}); }),
              "save: '" + dev + "' is a character device, not a regular file; refusing to replace it");
    struct stat st {};
    ASSERT_EQ(::lstat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  } else {
    EXPECT_EQ(errno, EPERM);  // not root: the FIFO and socket cases stand for devices
  }

  const std::string target = dir.file("target");
  spit(target, "target content");
  const std::string link = dir.file("link");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(error_of([&] { write_file_atomically(link, "x", {.what = "save"}); }),
            "save: '" + link + "' is a symbolic link (to '" + target +
                "'); lmcore does not write through links: pass the target's path, or remove the link");
  const std::string dangling = dir.file("dangling");
  ASSERT_EQ(::symlink("nowhere", dangling.c_str()), 0);
  EXPECT_NE(error_of([&] { write_file_atomically(dangling, "x"); }).find("is a symbolic link (to 'nowhere')"),
            std::string::npos);
  EXPECT_EQ(slurp(target), "target content");
  struct stat st {};
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // Nothing but what the test made: no temporaries were created for the refused destinations.
  for (const std::string& n : dir.names()) EXPECT_EQ(n.find(".tmp."), std::string::npos) << n;
}

TEST(AtomicFile, MissingDirectoryIsNamed) {
  TempDir dir;
  const std::string dest = dir.file("no/such/dir/out");
  EXPECT_EQ(error_of([&] { write_file_atomically(dest, "x", {.what = "save"}); }),
            "save: cannot create a temporary file next to '" + dest + "': No such file or directory");
}

// check_can_create, run before long work, refuses what the AtomicFile at the end would refuse, and
// creates nothing.
TEST(AtomicFile, CheckCanCreateBeforeTheWork) {
  TempDir dir;
  EXPECT_NO_THROW(check_can_create(dir.file("new.json"), "train"));
  spit(dir.file("old.json"), "x");
  EXPECT_NO_THROW(check_can_create(dir.file("old.json"), "train"));
  const std::string missing = dir.file("no/such/out.json");
  EXPECT_EQ(error_of([&] { check_can_create(missing, "train"); }),
            "train: cannot write '" + missing + "': its directory '" + dir.file("no/such") +
                "': No such file or directory");
  EXPECT_EQ(error_of([&] { check_can_create(dir.path(), "train"); }),
            "train: '" + dir.path() + "' is a directory, not a regular file; refusing to replace it");
  const std::string under_file = dir.file("old.json/out.json");
  EXPECT_EQ(error_of([&] { check_can_create(under_file, "train"); }),
            "train: cannot check '" + under_file + "': Not a directory");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"old.json"});
}

// A child process that opens an AtomicFile for `dest`, writes `bytes` to it and waits to be signalled;
// returns once the temporary exists.
struct StalledWriter {
  pid_t pid = -1;
  int ready[2] = {-1, -1};

  StalledWriter(const std::string& dest, std::size_t bytes) {
    if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
    pid = ::fork();
    if (pid == 0) {
      // SIGTERM and SIGINT at their default action, as in a CLI process started from a terminal (a shell
      // that runs the tests in the background hands its children SIGINT ignored, which the cleanup keeps).
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      AtomicFile f(dest);
      f.write(std::string(bytes, 'q'));
      (void)write_all(ready[1], "r");
      ::pause();
      ::_exit(3);
    }
    char c;
    if (read_full(ready[0], &c, 1) != 1) throw std::runtime_error("the writer did not start");
  }
  // The wait status after `sig`.
  int kill_and_wait(int sig) const {
    ::kill(pid, sig);
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) throw std::runtime_error("waitpid failed");
    return status;
  }
  ~StalledWriter() {
    ::close(ready[0]);
    ::close(ready[1]);
  }
};

// Defect 5 of issue 13: a writer killed by SIGTERM or SIGINT left "OUT.tmp.XXXXXX" behind.
void expect_signal_removes_temporary(int sig) {
  TempDir dir;
  StalledWriter writer(dir.file("out.bin"), 8 << 20);
  ASSERT_EQ(dir.names().size(), 1u);  // the temporary
  const int status = writer.kill_and_wait(sig);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
  EXPECT_TRUE(dir.names().empty()) << dir.names()[0];
}

TEST(AtomicFile, SigtermRemovesTheTemporaryAndStillKills) { expect_signal_removes_temporary(SIGTERM); }
TEST(AtomicFile, SigintRemovesTheTemporaryAndStillKills) { expect_signal_removes_temporary(SIGINT); }

// Nothing can run on SIGKILL, so the next write to the same destination sweeps what it left.
TEST(AtomicFile, NextWriteSweepsTheTemporaryOfAKilledWriter) {
  TempDir dir;
  const std::string dest = dir.file("out.bin");
  StalledWriter writer(dest, 3 << 20);
  writer.kill_and_wait(SIGKILL);
  const std::vector<std::string> left = dir.names();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind("out.bin.tmp." + std::to_string(writer.pid) + ".", 0), 0u) << left[0];

  // Files that only look alike, or belong to another destination, stay.
  spit(dir.file("out.bin.tmp.notes"), "mine");
  spit(dir.file("other.bin.tmp.1.abcdef"), "other destination");
  spit(dir.file("out.bin.tmp.12.abc"), "suffix too short");
  write_file_atomically(dest, "new");
  EXPECT_EQ(slurp(dest), "new");
  EXPECT_EQ(dir.names(),
            (std::vector<std::string>{"other.bin.tmp.1.abcdef", "out.bin", "out.bin.tmp.12.abc", "out.bin.tmp.notes"}));
}

TEST(AtomicFile, SweepSparesLiveAndYoungTemporaries) {
  TempDir dir;
  const std::string dest = dir.file("d");
  AtomicFile live(dest);  // holds its lock
  live.write("live");
  // A young file of a live process without the lock: a writer between its create and its flock.
  const std::string young = dest + ".tmp." + std::to_string(::getpid()) + ".Young1";
  spit(young, "y");
  // The same, but old: a leftover of a process whose pid is in use again.
  const std::string old = dest + ".tmp." + std::to_string(::getpid()) + ".Old123";
  spit(old, "o");
  struct timespec times[2] = {{::time(nullptr) - 600, 0}, {::time(nullptr) - 600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old.c_str(), times, 0), 0);
  EXPECT_EQ(sweep_stale_temporaries(dest), 1u);
  EXPECT_TRUE(std::filesystem::exists(live.temp_path()));
  EXPECT_TRUE(std::filesystem::exists(young));
  EXPECT_FALSE(std::filesystem::exists(old));
  live.commit();
  EXPECT_EQ(slurp(dest), "live");
}

TEST(AtomicFile, ConcurrentWritersLeaveOneWholeVersion) {
  TempDir dir;
  const std::string dest = dir.file("shared");
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) write_file_atomically(dest, std::string(10000 + t, static_cast<char>('a' + t)), {.durable = false});
    });
  }
  for (auto& th : threads) th.join();
  const std::string got = slurp(dest);
  ASSERT_GE(got.size(), 10000u);
  const int t = static_cast<int>(got.size()) - 10000;
  ASSERT_LT(t, 8);
  EXPECT_EQ(got, std::string(10000 + t, static_cast<char>('a' + t)));
  EXPECT_EQ(dir.names(), std::vector<std::string>{"shared"});
}

}  // namespace
}  // namespace lmcore::base
