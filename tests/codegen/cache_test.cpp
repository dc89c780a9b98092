// The machinery around the kernels: the cache (checksums, atomic install under two racing processes,
// LRU eviction), the compile pool with a failing and a hanging fake compiler, and no compiler at all.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "codegen_test_util.h"
#include "lmcore/codegen/cache.h"
#include "lmcore/codegen/generator.h"
#include "lmcore/codegen/rmsnorm.h"
#include "lmcore/core/cpu_capability.h"
#include "lmcore/core/error.h"

namespace lmcore::codegen {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Forward of `k` on 3 rows against the reference: true when every element is within 1e-5 relative
// (the full bounds are the business of rmsnorm_test.cpp; here a wrong or stale kernel must show).
bool forward_ok(const RmsNormKernel& k) {
  const std::int64_t C = k.spec().hidden, N = 3;
  std::vector<float> x(static_cast<std::size_t>(N * C)), w(static_cast<std::size_t>(C)), out(x.size()), rstd(N);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * double(i)) * 2;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 1.0f + 0.25f * std::cos(double(i));
  k.forward(out.data(), rstd.data(), x.data(), nullptr, nullptr, w.data(), N);
  std::vector<double> want(x.size()), want_rstd(N);
  reference::rmsnorm_forward(want.data(), want_rstd.data(), nullptr, x.data(), nullptr, w.data(), N, k.spec());
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(out[i] - want[i]) <= 1e-5 * std::abs(want[i]) + 1e-30)) return false;
  return true;
}

std::string capture_stderr_of(const std::function<void()>& fn) {
  ::testing::internal::CaptureStderr();
  fn();
  return ::testing::internal::GetCapturedStderr();
}

std::size_t count_files(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

TEST(CodegenCompiler, FailingCompilerFallsBackWithOneWarning) {
  TempDir dir;
  detail::reset_for_testing();
  Options o = testing::test_options(dir.path() + "/cache");
  o.compiler = testing::write_script(dir.path() + "/failcc",
                                     "case \"$1\" in --version) echo 'failcc 1.0';; "
                                     "*) echo 'failcc: error: refusing to compile' >&2; exit 3;; esac\n");
  const RmsNormSpec spec{65, 1e-5f};
  RmsNormKernel k;
  const std::string err = capture_stderr_of([&] { k = RmsNormKernel::get(spec, o); });
  EXPECT_FALSE(k.generated());
  EXPECT_NE(k.why_generic().find("exit 3"), std::string::npos) << k.why_generic();
  EXPECT_NE(err.find("refusing to compile"), std::string::npos) << err;
  EXPECT_NE(err.find("using the generic kernels"), std::string::npos) << err;
  EXPECT_TRUE(forward_ok(k));
  // A second kernel that fails the same way does not warn again.
  const std::string err2 = capture_stderr_of([&] { k = RmsNormKernel::get({66, 1e-5f}, o); });
  EXPECT_EQ(err2, "");
  EXPECT_FALSE(k.generated());
  EXPECT_TRUE(KernelCache(o.cache_dir, o.cache_max_bytes).list().empty()) << "no entry for a failed compile";
  EXPECT_EQ(count_files(fs::path(o.cache_dir) / "tmp"), 0u) << "staging directories are removed";
}

TEST(CodegenCompiler, HangingCompilerIsKilledAtTheTimeout) {
  TempDir dir;
  detail::reset_for_testing();
  Options o = testing::test_options(dir.path() + "/cache");
  const std::string marker = dir.path() + "/still-running";
  // The compile sleeps in a child of the script: the whole process group must be killed.
  o.compiler = testing::write_script(dir.path() + "/hangcc",
                                     "case \"$1\" in --version) echo 'hangcc 1.0';; "
                                     "*) (/bin/sleep 30; /bin/touch " + marker + ") & wait;; esac\n");
  o.compile_timeout_seconds = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  RmsNormKernel k;
  const std::string err = capture_stderr_of([&] { k = RmsNormKernel::get({64, 1e-5f}, o); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(k.generated());
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(k.why_generic().find("timed out after"), std::string::npos) << k.why_generic();
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
  EXPECT_TRUE(forward_ok(k));
  // Parallel compiles time out independently.
  CompilePool pool(*find_compiler(o, nullptr), 4, 0.3);
  const auto t1 = std::chrono::steady_clock::now();
  const auto results = pool.compile_all({{"a.cpp", dir.path() + "/a.so"}, {"b.cpp", dir.path() + "/b.so"},
                                         {"c.cpp", dir.path() + "/c.so"}, {"d.cpp", dir.path() + "/d.so"}});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 5.0);
  for (const auto& r : results) EXPECT_TRUE(r.timed_out && !r.ok);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(fs::exists(marker));
}

TEST(CodegenCompiler, NoCompilerAtAll) {
  TempDir dir;
  detail::reset_for_testing();
  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  const char* old_cxx = std::getenv("LMCORE_CXX");
  const std::string saved_cxx = old_cxx ? old_cxx : "";
  ::setenv("PATH", dir.path().c_str(), 1);  // an empty directory
  ::unsetenv("LMCORE_CXX");
  Options o = Options::from_env();
  o.cache_dir = dir.path() + "/cache";
  RmsNormKernel k;
  const std::string err = capture_stderr_of([&] { k = RmsNormKernel::get({7, 1e-5f}, o); });
  ::setenv("PATH", old_path.c_str(), 1);
  if (old_cxx) ::setenv("LMCORE_CXX", saved_cxx.c_str(), 1);
  EXPECT_FALSE(k.generated());
  EXPECT_NE(k.why_generic().find("no C++ compiler"), std::string::npos) << k.why_generic();
  EXPECT_NE(err.find("no C++ compiler: LMCORE_CXX is unset and there is no c++ on PATH"), std::string::npos) << err;
  EXPECT_TRUE(forward_ok(k));
  // A named compiler that does not exist says so.
  detail::reset_for_testing();
  o.compiler = dir.path() + "/nonexistent-c++";
  const std::string err2 = capture_stderr_of([&] { k = RmsNormKernel::get({7, 1e-5f}, o); });
  EXPECT_NE(k.why_generic().find("nonexistent-c++' (LMCORE_CXX) not found"), std::string::npos) << k.why_generic();
}

TEST(CodegenCompiler, VersionIsRememberedPerExecutable) {
  TempDir dir;
  Options o = testing::test_options(dir.path() + "/cache");
  const std::string asked = dir.path() + "/asked";
  o.compiler = testing::write_script(dir.path() + "/vcc", "echo 'vcc 1.0'; /bin/touch " + asked + "\n");
  auto c = find_compiler(o, nullptr);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->version, "vcc 1.0");
  EXPECT_TRUE(fs::exists(asked));
  fs::remove(asked);
  c = find_compiler(o, nullptr);  // from compilers/ in the cache: no process
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->version, "vcc 1.0");
  EXPECT_FALSE(fs::exists(asked));
  // A changed executable (size, mtime) is asked again.
  testing::write_script(o.compiler, "echo 'vcc 2.0 (upgraded)'; /bin/touch " + asked + "\n");
  c = find_compiler(o, nullptr);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->version, "vcc 2.0 (upgraded)");
  EXPECT_TRUE(fs::exists(asked));
}

// LMCORE_CPU_CAPABILITY reaches the generated kernels, as ATEN_CPU_CAPABILITY reaches Inductor's: the
// compile flags take away what the cap excludes, the natural vector width follows, and a kernel built
// under the cap runs and gives the uncapped kernel's results within rounding.
TEST(CodegenCompiler, CpuCapabilityCapsTheGeneratedKernels) {
  if (!testing::have_compiler()) GTEST_SKIP() << "no C++ compiler";
  const std::string before = cpu_capability();
  TempDir dir;
  const Options o = testing::test_options(dir.path() + "/cache");
  const struct {
    const char* cap;
    const char* flag;
    int widest;
  } caps[] = {{"avx2", "-mno-avx512f", 8}, {"sse4", "-mno-avx", 4}, {"ssse3", "-mno-sse4.1", 4}, {"default", "-mno-sse3", 4}};
  for (const auto& c : caps) {
    SCOPED_TRACE(c.cap);
    limit_cpu_capability(c.cap);
    const auto compiler = find_compiler(o, nullptr);
    ASSERT_TRUE(compiler.has_value());
    EXPECT_NE(compiler->flags_string().find(std::string("-march=native ") + c.flag), std::string::npos)
        << compiler->flags_string();
    EXPECT_LE(native_vector_floats(), c.widest);
  }
  // A kernel compiled at sse4 (4-lane vectors, no FMA) against the uncapped one.
  const RmsNormSpec spec{67, 1e-5f};
  limit_cpu_capability("sse4");
  const RmsNormKernel capped = RmsNormKernel::get(spec, o);
  limit_cpu_capability("none");
  EXPECT_EQ(find_compiler(o, nullptr)->flags_string().find("-mno-"), std::string::npos);
  const RmsNormKernel full = RmsNormKernel::get(spec, o);
  limit_cpu_capability(before);
  ASSERT_TRUE(capped.generated()) << capped.why_generic();
  ASSERT_TRUE(full.generated()) << full.why_generic();
  const std::int64_t N = 5;
  std::vector<float> x(static_cast<std::size_t>(N * spec.hidden)), w(static_cast<std::size_t>(spec.hidden));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.01f * static_cast<float>(i);
  std::vector<float> y1(x.size()), y2(x.size()), r1(N), r2(N);
  capped.forward(y1.data(), r1.data(), x.data(), nullptr, nullptr, w.data(), N);
  full.forward(y2.data(), r2.data(), x.data(), nullptr, nullptr, w.data(), N);
  // The sum of 67 squares in another order and without FMA: a few f32 roundings of rstd, then two
  // rounded products. Measured: 4.48 units of 2^-24 |y| at worst (LMCORE_TEST_REPORT_ERRORS=1); the
  // bound of 8 is far below a 1% difference.
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(y1[i], y2[i], 8 * 0x1p-24 * std::abs(y2[i]) + 1e-30) << i;
    if (y2[i] != 0) worst = std::max(worst, std::abs(double(y1[i]) - y2[i]) / (0x1p-24 * std::abs(y2[i])));
  }
  if (std::getenv("LMCORE_TEST_REPORT_ERRORS") != nullptr) std::printf("[error] sse4 vs native rmsnorm: %.2f ulp\n", worst);
}

TEST(CodegenCompiler, DisabledMeansGeneric) {
  Options o = testing::test_options();
  o.enabled = false;
  const RmsNormKernel k = RmsNormKernel::get({7, 1e-5f}, o);
  EXPECT_FALSE(k.generated());
  EXPECT_NE(k.why_generic().find("LMCORE_CODEGEN=0"), std::string::npos);
}

TEST(CodegenCompiler, EnvironmentIsValidated) {
  // Each value is refused with the variable's name: not parsed, negative, fractional where a count is
  // meant, beyond the range (20 digits used to wrap through a cast to int), not finite.
  const std::pair<const char*, const char*> bad[] = {
      {"LMCORE_COMPILE_WORKERS", "lots"},  {"LMCORE_COMPILE_WORKERS", "-1"},
      {"LMCORE_COMPILE_WORKERS", "2.5"},   {"LMCORE_COMPILE_WORKERS", "1025"},
      {"LMCORE_COMPILE_WORKERS", "99999999999999999999"},
      {"LMCORE_CACHE_MAX_MB", "1e300"},    {"LMCORE_CACHE_MAX_MB", "inf"},
      {"LMCORE_COMPILE_TIMEOUT", "0"},     {"LMCORE_COMPILE_TIMEOUT", "nan"},
      {"LMCORE_COMPILE_TIMEOUT", "1e9"}};
  for (const auto& [name, value] : bad) {
    ::setenv(name, value, 1);
    try {
      Options::from_env();
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(name) + "=" + value + ": expected"), std::string::npos)
          << e.what();
    }
    ::unsetenv(name);
  }
  ::setenv("LMCORE_COMPILE_WORKERS", "3", 1);
  ::setenv("LMCORE_CACHE_MAX_MB", "0.5", 1);
  ::setenv("LMCORE_COMPILE_TIMEOUT", "2.5", 1);
  const Options o = Options::from_env();
  EXPECT_EQ(o.workers, 3);
  EXPECT_EQ(o.cache_max_bytes, 512u * 1024);
  EXPECT_EQ(o.compile_timeout_seconds, 2.5);
  for (const char* name : {"LMCORE_COMPILE_WORKERS", "LMCORE_CACHE_MAX_MB", "LMCORE_COMPILE_TIMEOUT"}) ::unsetenv(name);
}

// Both children compile the same kernel into one empty cache at the same moment.
TEST(CodegenCache, TwoProcessesRaceOnOneKey) {
  TempDir dir;
  detail::reset_for_testing();
  const Options o = testing::test_options(dir.path() + "/cache");
  const bool cc = testing::have_compiler();
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t kids[2];
  for (pid_t& pid : kids) {
    pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      char c;
      ::close(go[1]);
      if (::read(go[0], &c, 1) != 0) ::_exit(10);  // wait for the start (EOF)
      const RmsNormKernel k = RmsNormKernel::get({4097, 1e-5f, DType::f32, DType::f32, true}, o);
      const RmsNormKernel k2 = RmsNormKernel::get({4097, 1e-5f}, o);  // and a second key, also raced
      ::_exit(k.generated() == cc && k2.generated() == cc && forward_ok(k2) ? 0 : 1);
    }
  }
  ::close(go[0]);
  ::close(go[1]);  // both start now
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  KernelCache cache(o.cache_dir, o.cache_max_bytes);
  const auto entries = cache.list();
  EXPECT_EQ(entries.size(), cc ? 2u : 0u);
  for (const auto& e : entries) EXPECT_TRUE(e.valid) << e.key;
  EXPECT_EQ(count_files(fs::path(o.cache_dir) / "tmp"), 0u) << "the loser's staging directory is removed";
  // This process loads what the children built, without compiling.
  const RmsNormKernel k = RmsNormKernel::get({4097, 1e-5f}, o);
  EXPECT_EQ(k.generated(), cc);
  EXPECT_TRUE(forward_ok(k));
}

TEST(CodegenCache, TruncatedEntryIsRebuilt) {
  TempDir dir;
  detail::reset_for_testing();
  const Options o = testing::test_options(dir.path() + "/cache");
  std::string why;
  if (!testing::have_compiler(&why)) {
    EXPECT_FALSE(RmsNormKernel::get({63, 1e-5f}, o).generated()) << why;
    return;
  }
  // Built by a child, so that this process never maps the file it truncates.
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(RmsNormKernel::get({63, 1e-5f}, o).generated() ? 0 : 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  KernelCache cache(o.cache_dir, o.cache_max_bytes);
  auto entries = cache.list();
  ASSERT_EQ(entries.size(), 1u);
  const fs::path so = fs::path(o.cache_dir) / entries[0].key / "kernel.so";
  fs::resize_file(so, fs::file_size(so) / 2);
  EXPECT_FALSE(cache.list()[0].valid);
  RmsNormKernel k;
  const std::string err = capture_stderr_of([&] { k = RmsNormKernel::get({63, 1e-5f}, o); });
  EXPECT_NE(err.find("is corrupt"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_TRUE(k.generated()) << k.why_generic();
  EXPECT_TRUE(forward_ok(k));
  entries = cache.list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_TRUE(entries[0].valid);
}

// Entries built by hand (no compiler needed): checksums and LRU order.
std::string fake_entry(KernelCache& cache, const std::string& key, std::size_t bytes) {
  const std::string st = cache.stage();
  std::ofstream(st + "/kernel.so") << std::string(bytes, 'k');
  return cache.install(st, key, "rmsnorm", "spec " + key.substr(0, 4), "W=16 U=4", "fakecc");
}

TEST(CodegenCache, OverwrittenEntryFailsItsChecksum) {
  TempDir dir;
  KernelCache cache(dir.path(), 1 << 20);
  const std::string key(40, 'a');
  const std::string so = fake_entry(cache, key, 1000);
  EXPECT_EQ(cache.lookup(key).value_or(""), so);
  {
    std::fstream f(so, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('X');
  }
  std::string why;
  EXPECT_FALSE(cache.lookup(key, &why).has_value());
  EXPECT_NE(why.find("does not match its recorded sha256"), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(fs::path(dir.path()) / key)) << "the corrupt entry is removed";
  // A missing meta is corruption too.
  fake_entry(cache, key, 10);
  fs::remove(fs::path(dir.path()) / key / "meta");
  EXPECT_FALSE(cache.lookup(key, &why).has_value());
  EXPECT_NE(why.find("meta"), std::string::npos) << why;
}

TEST(CodegenCache, LeastRecentlyUsedEntriesAreEvicted) {
  TempDir dir;
  KernelCache cache(dir.path(), 2600);  // room for two entries of ~1.1 KB (kernel.so + meta)
  const std::string a(40, 'a'), b(40, 'b'), c(40, 'c');
  fake_entry(cache, a, 1000);
  fake_entry(cache, b, 1000);
  // Make the order unambiguous: b used long ago, a just now.
  const timespec old_times[2] = {{1000, 0}, {1000, 0}};
  ::utimensat(AT_FDCWD, (fs::path(dir.path()) / b).c_str(), old_times, 0);
  ASSERT_TRUE(cache.lookup(a).has_value());
  fake_entry(cache, c, 1000);
  std::vector<std::string> keys;
  for (const auto& e : cache.list()) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{a, c}));
  for (const auto& e : cache.list()) EXPECT_EQ(e.spec, "spec " + e.key.substr(0, 4));
  EXPECT_GT(cache.clear(), 2000u);
  EXPECT_TRUE(cache.list().empty());
}

// LMCORE_CACHE_DIR may name a folder that holds other things; clear() used to delete any "tmp",
// "tune" or "compilers" folder in it whole (LMCORE_CACHE_DIR=$HOME took ~/tmp with it).
TEST(CodegenCache, ClearRemovesOnlyWhatTheCacheMade) {
  TempDir dir;
  const fs::path d(dir.path());
  fs::create_directories(d / "tmp");
  fs::create_directories(d / "compilers");
  fs::create_directories(d / "projects");
  std::ofstream(d / "tmp" / "notes.txt") << "mine";
  std::ofstream(d / "compilers" / "README") << "mine";
  std::ofstream(d / "projects" / "a.cpp") << "mine";
  std::ofstream(d / "todo.txt") << "mine";
  KernelCache cache(dir.path(), 1 << 20);
  const std::string key(40, 'e');
  fake_entry(cache, key, 1000);
  cache.write_tuning(std::string(40, 'f'), "blas 128x1024;");
  std::ofstream(d / "tune" / "my-notes") << "mine";
  std::ofstream(d / "compilers" / std::string(40, '1')) << "g++ 12\n";
  std::ofstream(d / "tune" / (std::string(40, '2') + ".tmp.123.0.7")) << "half";  // a killed write's leftover
  fs::create_directories(d / "tmp" / "stage-1-2-3");
  std::ofstream(d / "tmp" / "stage-1-2-3" / "kernel.so") << "half";
  EXPECT_GT(cache.clear(), 1000u);
  EXPECT_TRUE(cache.list().empty());
  EXPECT_FALSE(cache.read_tuning(std::string(40, 'f')).has_value());
  for (const char* gone : {"tmp/stage-1-2-3", "compilers/1111111111111111111111111111111111111111",
                           "tune/2222222222222222222222222222222222222222.tmp.123.0.7"})
    EXPECT_FALSE(fs::exists(d / gone)) << gone;
  for (const char* kept : {"tmp/notes.txt", "compilers/README", "projects/a.cpp", "todo.txt", "tune/my-notes"})
    EXPECT_TRUE(fs::exists(d / kept)) << kept << " is not the cache's";
}

TEST(CodegenCache, TuningRecords) {
  TempDir dir;
  KernelCache cache(dir.path(), 1 << 20);
  EXPECT_FALSE(cache.read_tuning("k1").has_value());
  cache.write_tuning("k1", "W=8 U=2");
  EXPECT_EQ(cache.read_tuning("k1").value_or(""), "W=8 U=2");
  std::ofstream(fs::path(dir.path()) / "tune" / "k2") << "W=8";  // cut before its newline
  EXPECT_FALSE(cache.read_tuning("k2").has_value());
}

}  // namespace
}  // namespace lmcore::codegen
