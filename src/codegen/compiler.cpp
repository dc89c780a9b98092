// The compiler and its pool. A compile is a posix_spawn of the compiler driver in a new process group;
// the calling thread polls waitpid() and kills the group on timeout. The pool is a counting slot set,
// so compile() can be called from many threads and compile_all() is threads over a shared job index.
#include "lmcore/codegen/compiler.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "lmcore/codegen/cache.h"
#include "lmcore/core/cpu_capability.h"
#include "lmcore/core/error.h"
#include "sha256.h"

extern char** environ;

namespace lmcore::codegen {

std::string Compiler::flags_string() const {
  std::string s;
  for (const auto& f : flags) s += (s.empty() ? "" : " ") + f;
  return s;
}

namespace detail {

std::string find_executable(const std::string& name) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return runnable(name) ? name : std::string();
  const char* path = std::getenv("PATH");
  if (!path) return {};
  std::string dirs = path;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + name;
    if (runnable(candidate)) return candidate;
    start = end + 1;
  }
  return {};
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds) {
  ProcessResult r;
  const auto t0 = std::chrono::steady_clock::now();
  char log_template[] = "/tmp/lmcore-codegen-XXXXXX";
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/lmcore-codegen-XXXXXX";
  std::vector<char> templ_buf(templ.begin(), templ.end());
  templ_buf.push_back('\0');
  int log_fd = ::mkstemp(templ_buf.data());
  if (log_fd < 0) {
    log_fd = ::mkstemp(log_template);
    if (log_fd < 0) {
      r.output = fmt::format("cannot create a temporary file: {}", std::strerror(errno));
      return r;
    }
    templ_buf.assign(log_template, log_template + sizeof log_template);
  }
  ::unlink(templ_buf.data());  // the descriptor keeps it alive

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    ::close(log_fd);
    r.output = fmt::format("cannot run {}: {}", argv[0], std::strerror(rc));
    return r;
  }

  // Poll: 1 ms at first (a compile of a small kernel takes a few hundred ms), backing off to 20 ms.
  int status = 0;
  auto sleep = std::chrono::microseconds(1000);
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > timeout_seconds) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
  // A script's background children may still hold the group: end them too.
  ::kill(-pid, SIGKILL);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);

  char buf[4096];
  ::lseek(log_fd, 0, SEEK_SET);
  ssize_t n;
  while (r.output.size() < (64u << 10) && (n = ::read(log_fd, buf, sizeof buf)) > 0) r.output.append(buf, std::size_t(n));
  ::close(log_fd);
  return r;
}

}  // namespace detail

CapabilityLimit capability_limit() {
  const std::string cap = cpu_capability();
  if (cap == "avx2") return {"-mno-avx512f", 8};
  if (cap == "sse4") return {"-mno-avx", 4};
  if (cap == "ssse3") return {"-mno-sse4.1", 4};
  if (cap == "default") return {"-mno-sse3", 4};
  return {nullptr, 16};
}

namespace {
// -march=native: the kernel is for this CPU (its features are in the key too), less what
// LMCORE_CPU_CAPABILITY caps (capability_limit()). -ffp-contract=fast: FMAs (ISO -std=c++17 would turn
// contraction off); no -ffast-math, so NaN and infinity propagate as in the generic kernels;
// --as-needed: no libstdc++ dependency.
std::vector<std::string> default_flags() {
  std::vector<std::string> flags = {"-std=c++17", "-O3", "-march=native"};
  if (const char* cap_flag = capability_limit().flag) flags.push_back(cap_flag);
  for (const char* f : {"-ffp-contract=fast", "-fPIC", "-shared", "-fno-exceptions", "-fno-rtti", "-fvisibility=hidden",
                        "-w", "-Wl,--as-needed"})
    flags.push_back(f);
  return flags;
}
}  // namespace

std::optional<Compiler> find_compiler(const Options& options, std::string* why) {
  std::string name = options.compiler;
  std::string path;
  if (!name.empty()) {
    path = detail::find_executable(name);
    if (path.empty()) {
      if (why) *why = fmt::format("compiler '{}' (LMCORE_CXX) not found or not executable", name);
      return std::nullopt;
    }
  } else {
    path = detail::find_executable("c++");
    if (path.empty()) {
      if (why) *why = "no C++ compiler: LMCORE_CXX is unset and there is no c++ on PATH";
      return std::nullopt;
    }
  }
  // The version is part of every key. Asking the driver costs a process start (a few ms, the bulk of a
  // warm load), so it is remembered in the cache per executable identity: path, inode, size, mtime.
  std::string ident_file;
  struct stat st {};
  if (!options.cache_dir.empty() && ::stat(path.c_str(), &st) == 0) {
    ident_file = options.cache_dir + "/compilers/" +
                 detail::sha256_hex(fmt::format("{}\n{}\n{}\n{}.{}", path, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                                                st.st_mtim.tv_nsec))
                     .substr(0, 40);
    std::FILE* f = std::fopen(ident_file.c_str(), "rb");
    if (f) {
      char buf[512];
      const std::size_t n = std::fread(buf, 1, sizeof buf, f);
      std::fclose(f);
      const std::string line(buf, n);
      if (n > 1 && n < sizeof buf && line.back() == '\n' && line.find('\n') == n - 1) {
        Compiler c;
        c.path = path;
        c.version = line.substr(0, n - 1);
        c.flags = default_flags();
        return c;
      }
    }
  }
  const auto v = detail::run_process({path, "--version"}, 10.0);
  if (v.exit_code != 0) {
    if (why)
      *why = v.timed_out ? fmt::format("compiler {} did not answer --version within 10 s", path)
                         : fmt::format("compiler {} --version failed (exit {}): {}", path, v.exit_code,
                                       v.output.substr(0, v.output.find('\n')));
    return std::nullopt;
  }
  Compiler c;
  c.path = path;
  c.version = v.output.substr(0, v.output.find('\n'));
  c.flags = default_flags();
  if (!ident_file.empty() && !c.version.empty()) {
    try {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(ident_file).parent_path(), ec);
      detail::write_file_atomic(ident_file, c.version + "\n");
    } catch (const Error&) {
      // A read-only cache only costs the --version call next time.
    }
  }
  return c;
}

struct CompilePool::Slots {
  std::mutex mu;
  std::condition_variable cv;
  int free = 0;
};

CompilePool::CompilePool(Compiler compiler, int workers, double timeout_seconds)
    : compiler_(std::move(compiler)), workers_(std::max(1, workers)), timeout_(timeout_seconds),
      slots_(std::make_shared<Slots>()) {
  slots_->free = workers_;
}

CompileResult CompilePool::compile(const CompileJob& job) {
  {
    std::unique_lock<std::mutex> lock(slots_->mu);
    slots_->cv.wait(lock, [&] { return slots_->free > 0; });
    --slots_->free;
  }
  std::vector<std::string> argv{compiler_.path};
  argv.insert(argv.end(), compiler_.flags.begin(), compiler_.flags.end());
  argv.insert(argv.end(), {"-o", job.output_path, job.source_path});
  const auto p = detail::run_process(argv, timeout_);
  {
    std::lock_guard<std::mutex> lock(slots_->mu);
    ++slots_->free;
  }
  slots_->cv.notify_one();
  CompileResult r;
  r.seconds = p.seconds;
  r.timed_out = p.timed_out;
  struct stat st {};
  r.ok = p.exit_code == 0 && !p.timed_out && ::stat(job.output_path.c_str(), &st) == 0 && st.st_size > 0;
  if (!r.ok) {
    std::string out = p.output;
    if (out.size() > 600) out = out.substr(0, 600) + "...";
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (p.timed_out) r.error = fmt::format("{} timed out after {:.0f} s (LMCORE_COMPILE_TIMEOUT)", compiler_.path, timeout_);
    else if (p.exit_code == 0) r.error = fmt::format("{} exited 0 but wrote no {}", compiler_.path, job.output_path);
    else r.error = fmt::format("{} failed (exit {}){}{}", compiler_.path, p.exit_code, out.empty() ? "" : ": ", out);
  }
  return r;
}

std::vector<CompileResult> CompilePool::compile_all(const std::vector<CompileJob>& jobs) {
  std::vector<CompileResult> results(jobs.size());
  std::atomic<std::size_t> next{0};
  const int n = std::min<int>(workers_, static_cast<int>(jobs.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) results[i] = compile(jobs[i]);
    });
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace lmcore::codegen
