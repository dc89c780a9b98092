// lmcore/codegen/compiler.h — the system C++ compiler, found at run time, and a pool of compiler
// processes with a timeout per compile.
//
//   std::string why;
//   auto cc = codegen::find_compiler(options, &why);       // LMCORE_CXX, else c++ on PATH
//   if (!cc) warn(why);
//   codegen::CompilePool pool(*cc, /*workers=*/4, /*timeout_seconds=*/60);
//   auto results = pool.compile_all(jobs);                  // up to 4 compiler processes at a time
//
// Each compile is its own process (group): a compiler that crashes or hangs cannot take the caller down,
// and on timeout the whole group (driver, cc1plus, a script's children) is killed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lmcore/codegen/spec.h"

namespace lmcore::codegen {

struct Compiler {
  std::string path;                // absolute path of the executable
  std::string version;             // first line of `path --version`
  std::vector<std::string> flags;  // used for every kernel; part of the cache key
  std::string flags_string() const;
};

// What LMCORE_CPU_CAPABILITY takes away from -march=native for generated kernels (as Inductor honours
// ATEN_CPU_CAPABILITY), and the widest vector, in floats, that leaves: {nullptr, 16} without a cap or
// at avx512, {"-mno-avx512f", 8} at avx2, {"-mno-avx", 4} at sse4 (no AVX, FMA or F16C either),
// {"-mno-sse4.1", 4} at ssse3, {"-mno-sse3", 4} at default.
struct CapabilityLimit {
  const char* flag;
  int widest_floats;
};
CapabilityLimit capability_limit();

// The compiler named by options.compiler (a path, or a name searched on PATH), else `c++` on PATH,
// answering --version within 10 s. nullopt with *why set ("no C++ compiler: LMCORE_CXX is unset and
// there is no c++ on PATH", "LMCORE_CXX=/x: not found", ...) when there is none.
std::optional<Compiler> find_compiler(const Options& options, std::string* why);

struct CompileJob {
  std::string source_path;  // a .cpp written by the caller
  std::string output_path;  // the .so to produce
};

struct CompileResult {
  bool ok = false;
  bool timed_out = false;
  double seconds = 0;
  std::string error;  // why it failed: exit status and the compiler's first lines of output
};

class CompilePool {
 public:
  CompilePool(Compiler compiler, int workers, double timeout_seconds);
  int workers() const { return workers_; }
  // One compile, blocking; at most `workers` run at once across all threads using this pool.
  CompileResult compile(const CompileJob& job);
  // Every job, `workers` at a time; results in job order.
  std::vector<CompileResult> compile_all(const std::vector<CompileJob>& jobs);

 private:
  Compiler compiler_;
  int workers_;
  double timeout_;
  struct Slots;
  std::shared_ptr<Slots> slots_;
};

namespace detail {
// Runs argv as a child process in its own process group with stdout and stderr captured (at most the
// first 64 KiB), killing the group after timeout_seconds. exit_code is the exit status, or 128 + the
// signal, or -1 when it could not be started.
struct ProcessResult {
  int exit_code = -1;
  bool timed_out = false;
  double seconds = 0;
  std::string output;
};
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds);
// An executable file `name` on PATH (or `name` itself when it contains a '/'); empty when none.
std::string find_executable(const std::string& name);
}  // namespace detail

}  // namespace lmcore::codegen
