// load_kernel / load_kernels (steps in runtime.h) and Options::from_env.
#include "lmcore/codegen/runtime.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/compiler.h"
#include "lmcore/codegen/kernel_abi.h"
#include "lmcore/core/error.h"
#include "sha256.h"

namespace lmcore::codegen {

namespace {

// A number from the environment in [lo, hi] (an integer when `integer`), or `fallback` when unset:
// anything else is an error naming the variable, never a wrapped or saturated value.
double env_number(const char* name, double fallback, double lo, double hi, bool integer = false) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  const bool ok = end && *end == '\0' && std::isfinite(d) && d >= lo && d <= hi && (!integer || d == std::floor(d));
  LMCORE_CHECK(ok, "{}={}: expected {} in [{}, {}]", name, v, integer ? "an integer" : "a number", lo, hi);
  return d;
}

struct State {
  std::mutex mu;
  std::set<std::string> warned;
  std::map<std::string, std::optional<Compiler>> compilers;  // by options.compiler
  std::map<std::string, std::string> compiler_why;
  std::map<std::string, void*> loaded;                        // by key
};

State& state() {
  static State* s = new State();  // never destroyed: kernels may run during static destruction
  return *s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Step 2: the compiler for this setting, found once per process.
std::optional<Compiler> compiler_for(const Options& options, std::string* why) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.compilers.find(options.compiler);
    if (it != s.compilers.end()) {
      *why = s.compiler_why[options.compiler];
      return it->second;
    }
  }
  std::string w;
  auto c = find_compiler(options, &w);
  std::lock_guard<std::mutex> lock(s.mu);
  s.compilers[options.compiler] = c;
  s.compiler_why[options.compiler] = w;
  *why = w;
  return c;
}

// Step 7: dlopen and check what the library says about itself.
void* open_checked(const std::string& path, const GeneratedSource& src, std::string* why) {
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    *why = fmt::format("cannot load {}: {}", path, e ? e : "dlopen failed");
    return nullptr;
  }
  auto abi = reinterpret_cast<lmcore_kernel_abi_version_fn>(::dlsym(h, "lmcore_kernel_abi_version"));
  auto spec = reinterpret_cast<lmcore_kernel_spec_fn>(::dlsym(h, "lmcore_kernel_spec"));
  if (!abi || !spec) {
    *why = fmt::format("{} lacks lmcore_kernel_abi_version / lmcore_kernel_spec", path);
    return nullptr;
  }
  if (abi() != LMCORE_KERNEL_ABI_VERSION) {
    *why = fmt::format("{} has kernel ABI {}, expected {}", path, abi(), LMCORE_KERNEL_ABI_VERSION);
    return nullptr;
  }
  if (src.spec != spec()) {
    *why = fmt::format("{} was generated for '{}', expected '{}'", path, spec(), src.spec);
    return nullptr;
  }
  return h;
}

struct Prepared {
  std::optional<Compiler> compiler;
  std::string key;
};

// Steps 1-5 (everything but compiling). Returns true when `out` is final.
bool prepare(const GeneratedSource& src, const Options& options, KernelCache* cache, Prepared* p, LoadedKernel* out) {
  if (!options.enabled) {
    out->why = "code generation is off (LMCORE_CODEGEN=0 or --codegen off)";
    return true;
  }
  std::string why;
  p->compiler = compiler_for(options, &why);
  if (!p->compiler) {
    out->why = why;
    warn_once("compiler", why);
    return true;
  }
  detail::Sha256 h;
  h.update(fmt::format("abi {}\n", LMCORE_KERNEL_ABI_VERSION));
  h.update(src.source);
  h.update("\ncompiler " + p->compiler->path + "\nversion " + p->compiler->version + "\nflags " +
           p->compiler->flags_string() + "\ncpu " + detail::cpu_features());
  p->key = h.hex().substr(0, 40);
  out->key = p->key;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    auto it = state().loaded.find(p->key);
    if (it != state().loaded.end()) {
      out->handle = it->second;
      out->path = (std::filesystem::path(cache->dir()) / p->key / "kernel.so").string();
      return true;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::string corrupt;
  if (auto path = cache->lookup(p->key, &corrupt)) {
    out->path = *path;
    std::string lwhy;
    if (void* hd = open_checked(*path, src, &lwhy)) {
      out->handle = hd;
      out->load_seconds = seconds_since(t0);
      std::lock_guard<std::mutex> lock(state().mu);
      state().loaded[p->key] = hd;
      return true;
    }
    // A library that verifies but does not load (built by a different libc?) is rebuilt below.
  } else if (!corrupt.empty()) {
    std::fprintf(stderr, "lmcore codegen: %s\n", corrupt.c_str());
  }
  return false;
}

// Step 6 for one kernel, given a compile function.
void build(const GeneratedSource& src, KernelCache* cache, const Prepared& p, CompilePool* pool, LoadedKernel* out) {
  const std::string staged = cache->stage();
  const std::string cpp = staged + "/kernel.cpp", so = staged + "/kernel.so";
  {
    std::ofstream f(cpp);
    f << src.source;
    if (!f) {
      out->why = fmt::format("cannot write {}", cpp);
      warn_once("compile", out->why);
      return;
    }
  }
  const CompileResult r = pool->compile({cpp, so});
  out->compile_seconds = r.seconds;
  if (!r.ok) {
    std::error_code ec;
    std::filesystem::remove_all(staged, ec);
    out->why = fmt::format("compiling {} failed: {}", src.spec, r.error);
    warn_once("compile", out->why);
    return;
  }
  out->compiled = true;
  const auto t0 = std::chrono::steady_clock::now();
  out->path = cache->install(staged, p.key, src.kind, src.spec, src.variant,
                             p.compiler->path + " " + p.compiler->version);
  std::string why;
  void* h = open_checked(out->path, src, &why);
  out->load_seconds = seconds_since(t0);
  if (!h) {
    out->why = why;
    warn_once("load", why);
    return;
  }
  out->handle = h;
  std::lock_guard<std::mutex> lock(state().mu);
  state().loaded[p.key] = h;
}

}  // namespace

Options Options::from_env() {
  Options o;
  const char* dir = std::getenv("LMCORE_CACHE_DIR");
  o.cache_dir = dir && *dir ? dir : KernelCache::default_dir();
  o.cache_max_bytes = static_cast<std::uint64_t>(env_number("LMCORE_CACHE_MAX_MB", 512, 0, 1 << 30) * 1024 * 1024);
  const char* cxx = std::getenv("LMCORE_CXX");
  o.compiler = cxx ? cxx : "";
  o.workers = static_cast<int>(env_number("LMCORE_COMPILE_WORKERS", 0, 0, 1024, true));  // 0: the core count
  if (o.workers <= 0) o.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.compile_timeout_seconds = env_number("LMCORE_COMPILE_TIMEOUT", 60, 0.001, 86400);
  const char* tune = std::getenv("LMCORE_AUTOTUNE");
  o.autotune = !(tune && std::string(tune) == "0");
  const char* on = std::getenv("LMCORE_CODEGEN");
  o.enabled = !(on && std::string(on) == "0");
  return o;
}

void* LoadedKernel::symbol(const char* name) const { return handle ? ::dlsym(handle, name) : nullptr; }

void warn_once(const std::string& category, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(state().mu);
    if (!state().warned.insert(category).second) return;
  }
  std::fprintf(stderr, "lmcore codegen: %s; using the generic kernels\n", message.c_str());
}

std::optional<Compiler> detail::cached_compiler(const Options& options, std::string* why) {
  std::string w;
  auto c = compiler_for(options, &w);
  if (why) *why = w;
  return c;
}

void detail::reset_for_testing() {
  std::lock_guard<std::mutex> lock(state().mu);
  state().warned.clear();
  state().compilers.clear();
  state().compiler_why.clear();
  state().loaded.clear();
}

LoadedKernel load_kernel(const GeneratedSource& source, const Options& options) {
  return load_kernels({source}, options).front();
}

std::vector<LoadedKernel> load_kernels(const std::vector<GeneratedSource>& sources, const Options& options,
                                       const std::function<void(std::size_t, std::size_t)>& progress) {
  std::vector<LoadedKernel> out(sources.size());
  if (sources.empty()) return out;
  std::optional<KernelCache> cache;
  if (options.enabled) {
    try {
      cache.emplace(options.cache_dir, options.cache_max_bytes);
    } catch (const Error& e) {
      for (auto& o : out) o.why = e.what();
      warn_once("cache", e.what());
      return out;
    }
  }
  std::vector<Prepared> prepared(sources.size());
  std::vector<std::size_t> misses;
  std::size_t done = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (prepare(sources[i], options, cache ? &*cache : nullptr, &prepared[i], &out[i])) {
      if (progress) progress(++done, sources.size());
    } else {
      misses.push_back(i);
    }
  }
  if (misses.empty()) return out;
  CompilePool pool(*prepared[misses.front()].compiler, options.workers, options.compile_timeout_seconds);
  std::mutex progress_mu;
  std::size_t next = 0;
  std::mutex next_mu;
  const int n = std::min<int>(pool.workers(), static_cast<int>(misses.size()));
  auto worker = [&] {
    for (;;) {
      std::size_t j;
      {
        std::lock_guard<std::mutex> lock(next_mu);
        if (next >= misses.size()) return;
        j = misses[next++];
      }
      try {
        build(sources[j], &*cache, prepared[j], &pool, &out[j]);
      } catch (const std::exception& e) {
        out[j].handle = nullptr;
        out[j].why = e.what();
        warn_once("compile", e.what());
      }
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress(++done, sources.size());
      }
    }
  };
  if (n == 1) {
    worker();
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }
  return out;
}

}  // namespace lmcore::codegen
