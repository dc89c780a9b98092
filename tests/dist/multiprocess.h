// Test helpers: run a function as N forked ranks and collect their exit statuses.
//
// The parent test process never creates a process group, so it stays single-threaded and fork() is
// safe. A rank reports failure by throwing (CHECK below); the message goes to stderr with the rank.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "lmcore/dist/process_group.h"

namespace lmcore::dist::testing {

// Throws from a rank (gtest assertions do not cross fork()).
#define RANK_CHECK(cond, ...)                                                                          \
  do {                                                                                                 \
    if (!(cond))                                                                                       \
      throw std::runtime_error(fmt::format("{}:{}: check failed: {}: ", __FILE__, __LINE__, #cond) + \
                               fmt::format(__VA_ARGS__));                                              \
  } while (0)

// The folders fresh_dir made, removed when the process that made them ends normally. Ranks are forked
// and leave through _exit, so a rank never removes a folder its test process still uses; each entry
// keeps the pid that made it for a rank that makes its own.
class FreshDirs {
 public:
  static FreshDirs& get() {
    static FreshDirs dirs;
    return dirs;
  }
  void add(std::string path) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.emplace_back(getpid(), std::move(path));
  }
  ~FreshDirs() {
    for (const auto& [pid, path] : dirs_) {
      std::error_code ec;  // a destructor must not throw; an unremovable entry only stays behind
      if (pid == getpid()) std::filesystem::remove_all(path, ec);
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<pid_t, std::string>> dirs_;
};

// A new folder under $TMPDIR (else /tmp), removed when the test process ends.
inline std::string fresh_dir(const char* tag) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = fmt::format("{}/lmcore-{}-XXXXXX", tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", tag);
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error(fmt::format("mkdtemp {}: {}", tmpl, strerror(errno)));
  FreshDirs::get().add(tmpl);
  return tmpl;
}

inline std::string fresh_store(const char* tag) { return "file://" + fresh_dir(tag); }

// Forks one child running fn(); returns its pid. The child exits 0 on success, 1 on an exception.
inline pid_t spawn(const std::function<void()>& fn, const std::string& label) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int code = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[%s] FAILED: %s\n", label.c_str(), e.what());
      code = 1;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);
  }
  return pid;
}

// Waits for the pids (killing all of them after `limit`); returns their raw wait statuses.
inline std::vector<int> wait_all(const std::vector<pid_t>& pids, std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::vector<int> status(pids.size(), -1);
  std::vector<bool> done(pids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::size_t left = pids.size();
  while (left > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st;
        done[i] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (!done[i]) kill(pids[i], SIGKILL);
      }
      limit = std::chrono::seconds(3600);
      std::fprintf(stderr, "wait_all: ranks still running after the limit were killed\n");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

inline GroupOptions group_options(int rank, int n, const std::string& store,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  GroupOptions o;
  o.rank = rank;
  o.world_size = n;
  o.store_url = store;
  o.timeout = timeout;
  return o;
}

inline ReduceOptions reduce_options(ReduceOp op, double factor = 1.0) {
  ReduceOptions r;
  r.op = op;
  r.premul_factor = factor;
  return r;
}

inline bool exited_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

// "exit 1", "killed by signal 13 (Broken pipe)": how a rank ended, for failure messages.
inline std::string describe_exit(int st) {
  if (WIFEXITED(st)) return fmt::format("exit {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("killed by signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
  return fmt::format("wait status {}", st);
}

// Runs fn(rank) as n ranks; true when all exit 0.
inline bool run_ranks(int n, const std::function<void(int)>& fn, std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) pids.push_back(spawn([&, r] { fn(r); }, fmt::format("rank {}", r)));
  bool ok = true;
  for (int st : wait_all(pids, limit)) {
    if (!exited_ok(st)) std::fprintf(stderr, "run_ranks: a rank ended with %s\n", describe_exit(st).c_str());
    ok = ok && exited_ok(st);
  }
  return ok;
}

}  // namespace lmcore::dist::testing
