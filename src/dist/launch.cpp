// lmcore::dist::launch (see lmcore/dist/launch.h): forks the local ranks, relays their output line by
// line with a rank prefix, reaps them, restarts or stops them, and passes signals on.
//
// Everything a child needs (program path, argv, environment, its error message) is built before
// fork(): the caller may have other threads (Python, a thread pool), and between fork() and exec()
// only async-signal-safe calls are safe.
#include "lmcore/dist/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"
#include "lmcore/dist/store.h"

extern char** environ;

namespace lmcore::dist {

namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// The launcher's signal dispositions while launch() runs: SIGINT and SIGTERM are recorded (and passed
// on to the ranks by the loop), SIGPIPE is ignored (a closed reader of our output must not kill the
// launcher while its ranks run). The previous ones come back at the end.
class SignalScope {
 public:
  SignalScope() {
    g_signal = 0;
    struct sigaction act {};
    act.sa_handler = on_signal;
    sigemptyset(&act.sa_mask);
    sigaction(SIGINT, &act, &old_int_);
    sigaction(SIGTERM, &act, &old_term_);
    act.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &act, &old_pipe_);
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {}, old_pipe_ {};
};

// The reader being gone is not an error: the ranks' output has nowhere to go, and they run on.
void write_all(int fd, std::string_view s) { (void)base::write_all(fd, s); }

// `name` as execvp would find it: a path when it holds a '/', else the first executable regular file
// of that name on PATH; `name` itself when there is none (exec then fails with ENOENT).
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    const std::string candidate = (std::filesystem::path(dir.empty() ? std::string_view(".") : dir) / name).string();
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) return name;
    dirs.remove_prefix(colon + 1);
  }
}

void check_options(const LaunchOptions& o) {
  LMCORE_CHECK(!o.command.empty() && !o.command[0].empty(), "launch: no command to run (command is empty)");
  LMCORE_CHECK(o.nproc >= 1 && o.nproc <= 4096, "launch: nproc (--nproc) {} must be in [1, 4096]", o.nproc);
  LMCORE_CHECK(o.nnodes >= 1 && o.nnodes <= 4096, "launch: nnodes (--nnodes) {} must be in [1, 4096]", o.nnodes);
  LMCORE_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "launch: node_rank (--node-rank) {} must be in [0, nnodes {})",
               o.node_rank, o.nnodes);
  LMCORE_CHECK(o.nnodes == 1 || !o.store.empty(),
               "launch: nnodes (--nnodes) {} needs a store shared by every machine: store (--store) redis://host:port",
               o.nnodes);
  LMCORE_CHECK(o.restart_failed >= 0, "launch: restart_failed (--restart-failed) {} must be >= 0", o.restart_failed);
  LMCORE_CHECK(o.kill_grace.count() >= 0, "launch: kill_grace {} ms must be >= 0", o.kill_grace.count());
  if (!o.store.empty()) check_store_url(o.store, "launch: store (--store)");
}

struct Child {
  int local = 0;  // index on this machine
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool exited = false;
  int status = 0;  // exit code, or 128 + signal
  int restarts = 0;
};

class Launcher {
 public:
  Launcher(const LaunchOptions& o, std::string store) : o_(o), store_(std::move(store)), program_(resolve_program(o.command[0])) {
    children_.resize(static_cast<std::size_t>(o.nproc));
    for (int i = 0; i < o.nproc; ++i) {
      children_[static_cast<std::size_t>(i)].local = i;
      children_[static_cast<std::size_t>(i)].rank = o.node_rank * o.nproc + i;
    }
  }

  int run() {
    // 1. Start every rank; if the system refuses one, stop those already running.
    for (Child& c : children_) {
      try {
        start(c);
      } catch (...) {
        stop_all(SIGKILL);
        for (Child& d : children_) {
          if (d.pid > 0 && !d.exited) ::waitpid(d.pid, nullptr, 0);
          close_pipes(d);
        }
        throw;
      }
    }
    // 2. Relay output, reap, restart or stop, pass signals on; until every rank has exited and its
    //    pipes are drained. A process a rank started and left running may hold them open: it is
    //    given kill_grace after the last rank's exit, then what it printed so far is flushed.
    std::chrono::steady_clock::time_point drain_until{};
    while (true) {
      pump(50);
      const bool all_exited = reap();
      const auto now = std::chrono::steady_clock::now();
      if (g_signal != 0 && !stopping_) {
        begin_stopping(g_signal);
        if (exit_code_ == 0) exit_code_ = 128 + g_signal;
      }
      if (stopping_ && now > kill_at_) stop_all(SIGKILL);
      if (!all_exited) continue;
      if (!pipes_open()) break;
      if (drain_until == std::chrono::steady_clock::time_point{}) drain_until = now + o_.kill_grace;
      if (now > drain_until) {
        for (Child& c : children_) {
          flush_lines(c.out_buf, c.rank, o_.stdout_fd, true);
          flush_lines(c.err_buf, c.rank, o_.stderr_fd, true);
          close_pipes(c);
        }
        break;
      }
    }
    return exit_code_;
  }

 private:
  // Forks child c (again, after a failure: its output pipes are new, what is left in the old ones is
  // printed first). Throws Error when the system refuses.
  void start(Child& c) {
    // Everything the child uses, made before fork().
    std::vector<std::string> env;
    const std::vector<std::pair<std::string, std::string>> ours = {
        {"LMCORE_RANK", std::to_string(c.rank)},
        {"LMCORE_LOCAL_RANK", std::to_string(c.local)},
        {"LMCORE_WORLD_SIZE", std::to_string(o_.nproc * o_.nnodes)},
        {"LMCORE_LOCAL_WORLD_SIZE", std::to_string(o_.nproc)},
        {"LMCORE_NODE_RANK", std::to_string(o_.node_rank)},
        {"LMCORE_STORE", store_},
    };
    bool python_unbuffered = false;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string_view kv(*e);
      const std::string_view key = kv.substr(0, kv.find('='));
      bool replaced = key == "LMCORE_RESTART_COUNT";
      for (const auto& [k, v] : ours) replaced = replaced || key == k;
      python_unbuffered = python_unbuffered || key == "PYTHONUNBUFFERED";
      if (!replaced) env.emplace_back(kv);
    }
    for (const auto& [k, v] : ours) env.push_back(k + "=" + v);
    if (c.restarts > 0) env.push_back("LMCORE_RESTART_COUNT=" + std::to_string(c.restarts));
    if (!python_unbuffered) env.emplace_back("PYTHONUNBUFFERED=1");
    std::vector<char*> envp, argv;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o_.command;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    const std::string cannot_run = "lmcore launch: cannot run '" + o_.command[0] + "': ";

    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) fail("launch: pipe failed: {}", std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
      const int e = errno;
      ::close(out[0]);
      ::close(out[1]);
      fail("launch: pipe failed: {}", std::strerror(e));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int e = errno;
      for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
      fail("launch: fork failed: {}", std::strerror(e));
    }
    if (pid == 0) {
      // The child: async-signal-safe calls only, until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      if (::getppid() != parent) ::_exit(127);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      for (int sig : {SIGINT, SIGTERM, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execve(program_.c_str(), argv.data(), envp.data());
      const char* why = ::strerrordesc_np(errno);
      (void)!::write(STDERR_FILENO, cannot_run.data(), cannot_run.size());
      (void)!::write(STDERR_FILENO, why, std::strlen(why));
      (void)!::write(STDERR_FILENO, "\n", 1);
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    c.pid = pid;
    // The previous run's pipes: what is still in them is printed before the new ones take their place
    // (not waiting for their end: a process the old one started may still hold them open).
    for (int* fd : {&c.out_fd, &c.err_fd}) {
      std::string& buf = fd == &c.out_fd ? c.out_buf : c.err_buf;
      const int to = fd == &c.out_fd ? o_.stdout_fd : o_.stderr_fd;
      while (drain(*fd, buf, c.rank, to)) {
      }
      if (*fd >= 0) {
        flush_lines(buf, c.rank, to, true);
        ::close(*fd);
        *fd = -1;
      }
    }
    c.out_fd = out[0];
    c.err_fd = err[0];
    c.exited = false;
    c.status = 0;
  }

  // Emits the complete lines of `buf` with the rank prefix; at EOF also the unterminated rest.
  static void flush_lines(std::string& buf, int rank, int fd, bool eof) {
    std::string out;
    std::size_t start = 0;
    for (std::size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      out += fmt::format("[rank {}] {}\n", rank, std::string_view(buf).substr(start, nl - start));
    }
    buf.erase(0, start);
    if (eof && !buf.empty()) {
      out += fmt::format("[rank {}] {}\n", rank, buf);
      buf.clear();
    }
    if (!out.empty()) write_all(fd, out);
  }

  // Reads what is there; true when something was read. At EOF (or a read error) flushes and closes.
  static bool drain(int& fd, std::string& buf, int rank, int out_fd) {
    if (fd < 0) return false;
    char chunk[65536];
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      buf.append(chunk, static_cast<std::size_t>(n));
      flush_lines(buf, rank, out_fd, false);
      return true;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      flush_lines(buf, rank, out_fd, true);
      ::close(fd);
      fd = -1;
    }
    return false;
  }

  void pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is_stderr)
    for (Child& c : children_) {
      if (c.out_fd >= 0) {
        fds.push_back({c.out_fd, POLLIN, 0});
        owners.emplace_back(&c, false);
      }
      if (c.err_fd >= 0) {
        fds.push_back({c.err_fd, POLLIN, 0});
        owners.emplace_back(&c, true);
      }
    }
    if (fds.empty()) {
      ::poll(nullptr, 0, timeout_ms);
      return;
    }
    ::poll(fds.data(), fds.size(), timeout_ms);
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Child& c = *owners[k].first;
      if (owners[k].second) {
        drain(c.err_fd, c.err_buf, c.rank, o_.stderr_fd);
      } else {
        drain(c.out_fd, c.out_buf, c.rank, o_.stdout_fd);
      }
    }
  }

  // Reaps exited ranks and acts on failures; true when every rank has exited.
  bool reap() {
    bool all_exited = true;
    for (Child& c : children_) {
      if (c.exited) continue;
      int st = 0;
      if (::waitpid(c.pid, &st, WNOHANG) != c.pid) {
        all_exited = false;
        continue;
      }
      c.exited = true;
      c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (c.status == 0) continue;
      const std::string how = WIFEXITED(st) ? fmt::format("exited with status {}", WEXITSTATUS(st))
                                            : fmt::format("was killed by signal {}", WTERMSIG(st));
      if (!stopping_ && c.restarts < o_.restart_failed) {
        ++c.restarts;
        write_all(o_.stderr_fd, fmt::format("lmcore launch: rank {} {}; starting it again ({} of {})\n", c.rank, how,
                                            c.restarts, o_.restart_failed));
        try {
          start(c);
          all_exited = false;
          continue;
        } catch (const Error& e) {
          write_all(o_.stderr_fd, fmt::format("lmcore launch: rank {} could not be started again: {}\n", c.rank, e.what()));
        }
      }
      if (exit_code_ == 0) exit_code_ = c.status;
      if (!o_.keep_going && !stopping_) {
        write_all(o_.stderr_fd, fmt::format("lmcore launch: rank {} {}; stopping the other ranks\n", c.rank, how));
        begin_stopping(SIGTERM);
      } else if (!stopping_) {
        write_all(o_.stderr_fd, fmt::format("lmcore launch: rank {} {} (--keep-going)\n", c.rank, how));
      }
    }
    return all_exited;
  }

  void begin_stopping(int sig) {
    stopping_ = true;
    stop_all(sig);
    kill_at_ = std::chrono::steady_clock::now() + o_.kill_grace;
  }

  void stop_all(int sig) {
    for (Child& c : children_) {
      if (c.pid > 0 && !c.exited) ::kill(c.pid, sig);
    }
  }

  bool pipes_open() const {
    for (const Child& c : children_) {
      if (c.out_fd >= 0 || c.err_fd >= 0) return true;
    }
    return false;
  }

  static void close_pipes(Child& c) {
    for (int* fd : {&c.out_fd, &c.err_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  const LaunchOptions& o_;
  const std::string store_;
  const std::string program_;
  std::vector<Child> children_;
  int exit_code_ = 0;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point kill_at_{};
};

// A fresh file store directory, removed when the launch ends.
class TempStore {
 public:
  TempStore() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/lmcore-launch-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      fail("launch: cannot create a store directory in {}: {}", std::filesystem::path(tmpl).parent_path().string(),
           std::strerror(errno));
    }
    dir_ = tmpl;
  }
  ~TempStore() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempStore(const TempStore&) = delete;
  TempStore& operator=(const TempStore&) = delete;
  std::string url() const { return "file://" + dir_; }

 private:
  std::string dir_;
};

}  // namespace

int launch(const LaunchOptions& options) {
  check_options(options);
  std::optional<TempStore> temp;
  if (options.store.empty()) temp.emplace();
  SignalScope signals;
  Launcher launcher(options, temp ? temp->url() : options.store);
  return launcher.run();
}

}  // namespace lmcore::dist
