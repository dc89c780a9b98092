// lmcore/codegen/runtime.h — from generated source to a loaded kernel library: the cache, the compile
// pool and dlopen, with the fallback decision in one place.
//
//   auto lib = codegen::load_kernel(generate_rmsnorm(spec, variant), options);
//   if (lib.handle) fn = lib.symbol("lmcore_rmsnorm_forward"); else use the generic kernel (lib.why says why)
//
// Steps for one kernel: (1) codegen disabled -> generic; (2) find the compiler (once per process and
// compiler setting); (3) key = sha256(ABI version, source, compiler path + version, flags, CPU flags);
// (4) a library already loaded by this process under that key is reused; (5) a verified cache entry is
// dlopen'ed (a corrupt one is removed and rebuilt); (6) otherwise the source is compiled in a staging
// directory, installed atomically and dlopen'ed; (7) the library must report the ABI version and the
// spec it was asked for. Any failure gives a null handle and `why`; the first failure of each kind
// (no compiler, compile failed, load failed) prints one warning on stderr.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lmcore/codegen/compiler.h"
#include "lmcore/codegen/generator.h"
#include "lmcore/codegen/spec.h"

namespace lmcore::codegen {

struct LoadedKernel {
  void* handle = nullptr;  // dlopen handle (never closed: kernels stay valid for the process's life)
  std::string key;         // cache key
  std::string path;        // the kernel.so loaded
  std::string why;         // when handle is null: why the generic kernel is used
  bool compiled = false;   // compiled by this call (a cache miss)
  double compile_seconds = 0, load_seconds = 0;
  void* symbol(const char* name) const;
};

LoadedKernel load_kernel(const GeneratedSource& source, const Options& options);

// Many kernels at once: cache hits are loaded, misses compiled options.workers at a time.
// `progress(done, total)` is called after each kernel. Results in input order.
std::vector<LoadedKernel> load_kernels(const std::vector<GeneratedSource>& sources, const Options& options,
                                       const std::function<void(std::size_t, std::size_t)>& progress = {});

// Prints "lmcore codegen: <message>; using the generic kernels" once per process per category.
void warn_once(const std::string& category, const std::string& message);

namespace detail {
// The compiler for options.compiler, found once per process (nullopt and *why when there is none).
std::optional<Compiler> cached_compiler(const Options& options, std::string* why);
// Forgets the warnings already printed and the compilers already found (tests).
void reset_for_testing();
}  // namespace detail

}  // namespace lmcore::codegen
