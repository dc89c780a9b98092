// lmcore launch --nproc N [--nnodes M --node-rank R --store URL] [--keep-going] [--restart-failed K] -- CMD ARGS
//
// Starts N local ranks of CMD with LMCORE_RANK, LMCORE_LOCAL_RANK, LMCORE_WORLD_SIZE,
// LMCORE_LOCAL_WORLD_SIZE, LMCORE_NODE_RANK and LMCORE_STORE set, prefixes every line they print with
// "[rank R] ", and, when a rank exits with a non-zero status, stops the others (SIGTERM, then
// SIGKILL after 3 s) and exits with that status. --keep-going lets the others run on (fault-tolerant
// jobs); the exit status is then the first non-zero one, or 0. --restart-failed K starts a rank that
// failed again, up to K times per rank, with the same environment plus LMCORE_RESTART_COUNT (1, 2,
// ...); the others run on meanwhile (an elastic job admits the restarted rank back). A rank's status
// is then that of its last run.
//
// One machine: the store defaults to a fresh file:// directory, removed at the end. Several
// machines: run one launcher per machine with the same --store redis://host:port.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tools/command.h"

namespace lmcore::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool exited = false;
  int status = 0;  // exit code, or 128 + signal
  int restarts = 0;
};

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

// Emits complete lines of `buf` with the rank prefix; at EOF also the unterminated rest.
void flush_lines(std::string& buf, int rank, int fd, bool eof) {
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

bool drain(int& fd, std::string& buf, int rank, int out_fd) {
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

}  // namespace

int run_launch(int argc, char** argv) {
  // Everything after "--" is the command; CLI11 parses what comes before.
  int split = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      split = i;
      break;
    }
  }
  CLI::App app{"Start N local ranks of a command with the LMCORE_* environment of a process group.",
               "lmcore launch"};
  int nproc = 1, nnodes = 1, node_rank = 0;
  std::string store;
  bool keep_going = false;
  int restart_failed = 0;
  app.add_option("--nproc", nproc, "ranks on this machine")->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", nnodes, "machines")->check(CLI::Range(1, 4096));
  app.add_option("--node-rank", node_rank, "this machine's index in [0, nnodes)")->check(CLI::NonNegativeNumber);
  app.add_option("--store", store, "file:///dir or redis://host:port (default: a fresh file store)");
  app.add_flag("--keep-going", keep_going, "do not stop the other ranks when one fails");
  app.add_option("--restart-failed", restart_failed,
                 "start a failed rank again, up to K times per rank (LMCORE_RESTART_COUNT tells it which time); "
                 "the other ranks run on meanwhile")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  try {
    app.parse(split, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // usage errors exit 2, as every lmcore command
  }
  if (split + 1 >= argc) {
    fmt::print(stderr, "lmcore launch: no command; usage: lmcore launch --nproc N [options] -- CMD ARGS\n");
    return 2;
  }
  if (node_rank >= nnodes) {
    fmt::print(stderr, "lmcore launch: --node-rank {} must be < --nnodes {}\n", node_rank, nnodes);
    return 2;
  }
  std::string temp_dir;
  if (store.empty()) {
    if (nnodes > 1) {
      fmt::print(stderr, "lmcore launch: --nnodes {} needs --store redis://host:port shared by every machine\n", nnodes);
      return 2;
    }
    std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) +
                       "/lmcore-launch-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      fmt::print(stderr, "lmcore launch: cannot create a store directory in {}: {}\n", tmpl, std::strerror(errno));
      return 2;
    }
    temp_dir = tmpl;
    store = "file://" + temp_dir;
  }

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  const pid_t launcher = getpid();
  std::vector<Child> children(static_cast<std::size_t>(nproc));
  // Forks child i (again, after a failure: its output pipes are new, what is left of the old ones is
  // still drained). False when the system refused.
  auto start_child = [&](int i) -> bool {
    Child& c = children[static_cast<std::size_t>(i)];
    c.rank = node_rank * nproc + i;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      fmt::print(stderr, "lmcore launch: pipe failed: {}\n", std::strerror(errno));
      return false;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      fmt::print(stderr, "lmcore launch: fork failed: {}\n", std::strerror(errno));
      return false;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      if (getppid() != launcher) _exit(127);
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      std::signal(SIGPIPE, SIG_DFL);
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      setenv("LMCORE_RANK", std::to_string(c.rank).c_str(), 1);
      setenv("LMCORE_LOCAL_RANK", std::to_string(i).c_str(), 1);
      setenv("LMCORE_WORLD_SIZE", std::to_string(nproc * nnodes).c_str(), 1);
      setenv("LMCORE_LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LMCORE_NODE_RANK", std::to_string(node_rank).c_str(), 1);
      setenv("LMCORE_STORE", store.c_str(), 1);
      if (c.restarts > 0) setenv("LMCORE_RESTART_COUNT", std::to_string(c.restarts).c_str(), 1);
      setenv("PYTHONUNBUFFERED", "1", 0);
      execvp(argv[split + 1], argv + split + 1);
      std::fprintf(stderr, "lmcore launch: cannot run '%s': %s\n", argv[split + 1], std::strerror(errno));
      _exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    c.pid = pid;
    // The previous run's pipes: what is still in them is printed before the new ones take their place
    // (not waiting for their end: a process the old one started may still hold them open).
    for (int* fd : {&c.out_fd, &c.err_fd}) {
      std::string& buf = fd == &c.out_fd ? c.out_buf : c.err_buf;
      const int to = fd == &c.out_fd ? STDOUT_FILENO : STDERR_FILENO;
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
    return true;
  };
  for (int i = 0; i < nproc; ++i)
    if (!start_child(i)) return 2;

  int exit_code = 0;
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at{};
  auto stop_all = [&](int sig) {
    for (auto& c : children) {
      if (!c.exited) kill(c.pid, sig);
    }
  };
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is_stderr)
    for (auto& c : children) {
      if (c.out_fd >= 0) { fds.push_back({c.out_fd, POLLIN, 0}); owners.push_back({&c, false}); }
      if (c.err_fd >= 0) { fds.push_back({c.err_fd, POLLIN, 0}); owners.push_back({&c, true}); }
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Child& c = *owners[k].first;
      if (owners[k].second) drain(c.err_fd, c.err_buf, c.rank, STDERR_FILENO);
      else drain(c.out_fd, c.out_buf, c.rank, STDOUT_FILENO);
    }
    // Reap.
    bool all_exited = true;
    for (auto& c : children) {
      if (c.exited) continue;
      int st = 0;
      if (waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.exited = true;
        c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (c.status != 0) {
          const std::string how = WIFEXITED(st) ? fmt::format("exited with status {}", WEXITSTATUS(st))
                                                : fmt::format("was killed by signal {}", WTERMSIG(st));
          if (!stopping && c.restarts < restart_failed) {
            ++c.restarts;
            write_all(STDERR_FILENO, fmt::format("lmcore launch: rank {} {}; starting it again ({} of {})\n", c.rank,
                                                 how, c.restarts, restart_failed));
            if (start_child(static_cast<int>(&c - children.data()))) {
              all_exited = false;
              continue;
            }
          }
          if (exit_code == 0) exit_code = c.status;
          if (!keep_going && !stopping) {
            write_all(STDERR_FILENO, fmt::format("lmcore launch: rank {} {}; stopping the other ranks\n", c.rank, how));
            stopping = true;
            stop_all(SIGTERM);
            kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
          } else if (!stopping) {
            write_all(STDERR_FILENO, fmt::format("lmcore launch: rank {} {} (--keep-going)\n", c.rank, how));
          }
        }
      } else {
        all_exited = false;
      }
    }
    if (g_signal != 0 && !stopping) {
      stopping = true;
      stop_all(g_signal);
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      if (exit_code == 0) exit_code = 128 + g_signal;
    }
    if (stopping && std::chrono::steady_clock::now() > kill_at) stop_all(SIGKILL);
    if (all_exited) {
      bool open = false;
      for (auto& c : children) open = open || c.out_fd >= 0 || c.err_fd >= 0;
      if (!open) break;
    }
  }
  if (!temp_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir, ec);
  }
  return exit_code;
}

}  // namespace lmcore::cli
