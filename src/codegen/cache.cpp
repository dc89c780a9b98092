// The kernel cache (layout and guarantees in cache.h).
#include "lmcore/codegen/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "lmcore/core/error.h"
#include "sha256.h"

namespace fs = std::filesystem;

namespace lmcore::codegen {

namespace detail {

namespace {
void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  return fmt::format("{}.{}.{}", ::getpid(), counter.fetch_add(1), std::rand() & 0xffff);
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + unique_suffix();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("codegen cache: cannot create {}: {}", tmp, std::strerror(errno));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("codegen cache: cannot write {}: {}", tmp, std::strerror(e));
    }
    done += std::size_t(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail("codegen cache: cannot rename {} to {}: {}", tmp, path, std::strerror(e));
  }
  fsync_path(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

const std::string& cpu_features() {
  static const std::string features = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0) return line.substr(line.find(':') + 1);
    return std::string("unknown");
  }();
  return features;
}

}  // namespace detail

namespace {

std::map<std::string, std::string> read_meta(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' ');
    if (sp != std::string::npos) m[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return m;
}

std::uint64_t tree_bytes(const fs::path& p) {
  std::error_code ec;
  std::uint64_t total = 0;
  for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}

bool is_key(const std::string& name) {
  return name.size() == 40 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

KernelCache::KernelCache(std::string dir, std::uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "tmp", ec);
  if (ec) fail("codegen cache: cannot create the cache directory {}: {}", dir_, ec.message());
}

std::string KernelCache::default_dir() {
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/lmcore/kernels";
  return fmt::format("/tmp/lmcore-kernels-{}", ::getuid());
}

std::optional<std::string> KernelCache::lookup(const std::string& key, std::string* why) {
  const fs::path entry = fs::path(dir_) / key;
  std::error_code ec;
  if (!fs::is_directory(entry, ec)) return std::nullopt;
  const std::string so = (entry / "kernel.so").string();
  const auto meta = read_meta((entry / "meta").string());
  std::uint64_t size = 0;
  const std::string sum = detail::sha256_file(so, &size);
  std::string problem;
  if (meta.count("sha256") == 0 || meta.count("size") == 0) problem = "its meta file is missing or incomplete";
  else if (sum.empty()) problem = "kernel.so is missing or unreadable";
  else if (std::to_string(size) != meta.at("size"))
    problem = fmt::format("kernel.so has {} bytes, its meta records {} (truncated?)", size, meta.at("size"));
  else if (sum != meta.at("sha256")) problem = "kernel.so does not match its recorded sha256";
  if (!problem.empty()) {
    if (why) *why = fmt::format("cache entry {} is corrupt ({}); rebuilding it", entry.string(), problem);
    // Move it aside first (atomic; a racing reader sees it or not), then delete.
    const fs::path trash = fs::path(dir_) / "tmp" / ("dead-" + key + "-" + std::to_string(::getpid()));
    if (::rename(entry.c_str(), trash.c_str()) == 0) fs::remove_all(trash, ec);
    return std::nullopt;
  }
  ::utimensat(AT_FDCWD, entry.c_str(), nullptr, 0);  // last use = now
  return so;
}

std::string KernelCache::stage() {
  static std::atomic<unsigned> counter{0};
  const fs::path p = fs::path(dir_) / "tmp" /
                     fmt::format("stage-{}-{}-{}", ::getpid(), counter.fetch_add(1), std::rand() & 0xffffff);
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) fail("codegen cache: cannot create {}: {}", p.string(), ec.message());
  return p.string();
}

std::string KernelCache::install(const std::string& staged, const std::string& key, const std::string& kind,
                                 const std::string& spec, const std::string& variant, const std::string& compiler) {
  const fs::path st(staged);
  const std::string so = (st / "kernel.so").string();
  std::uint64_t size = 0;
  const std::string sum = detail::sha256_file(so, &size);
  LMCORE_CHECK(!sum.empty(), "codegen cache: {} is unreadable", so);
  {
    const int fd = ::open(so.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) { ::fsync(fd); ::close(fd); }
  }
  detail::write_file_atomic((st / "meta").string(),
                            fmt::format("sha256 {}\nsize {}\nkind {}\nspec {}\nvariant {}\ncompiler {}\n", sum, size,
                                        kind, spec, variant, compiler));
  const fs::path entry = fs::path(dir_) / key;
  std::error_code ec;
  if (::rename(staged.c_str(), entry.c_str()) != 0) {
    // ENOTEMPTY / EEXIST: another process installed this key first; its entry is as good as ours.
    fs::remove_all(st, ec);
  } else {
    const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) { ::fsync(fd); ::close(fd); }
  }
  evict(key);
  return (entry / "kernel.so").string();
}

std::vector<CacheEntry> KernelCache::list() const {
  std::vector<CacheEntry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_key(name) || !it->is_directory(ec)) continue;
    CacheEntry e;
    e.key = name;
    const auto meta = read_meta((it->path() / "meta").string());
    auto get = [&](const char* k) { return meta.count(k) ? meta.at(k) : std::string(); };
    e.kind = get("kind");
    e.spec = get("spec");
    e.variant = get("variant");
    e.compiler = get("compiler");
    e.bytes = tree_bytes(it->path());
    struct stat st {};
    if (::stat(it->path().c_str(), &st) == 0) e.last_use = st.st_mtim.tv_sec;
    std::uint64_t size = 0;
    const std::string sum = detail::sha256_file((it->path() / "kernel.so").string(), &size);
    e.valid = !sum.empty() && sum == get("sha256") && std::to_string(size) == get("size");
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.last_use != b.last_use ? a.last_use > b.last_use : a.key < b.key;
  });
  return out;
}

namespace {

// A file of tune/ or compilers/ that this cache wrote: a 40-hex key, or the temporary of an atomic
// write of one that a killed process left ("<key>.tmp.<suffix>").
bool is_record_file(const std::string& name) {
  return is_key(name.substr(0, 40)) && (name.size() == 40 || name.compare(40, 5, ".tmp.") == 0);
}

// A staging or trash folder of tmp/ (stage(), lookup()'s and evict()'s moves).
bool is_scratch(const std::string& name) {
  return name.rfind("stage-", 0) == 0 || name.rfind("dead-", 0) == 0 || name.rfind("evict-", 0) == 0;
}

}  // namespace

std::uint64_t KernelCache::clear() {
  // Only what this cache makes goes: LMCORE_CACHE_DIR may name a folder that holds other things too
  // ($HOME, a project's tmp/), and a plain "tmp" or "compilers" folder there is not ours to delete.
  std::uint64_t freed = 0;
  std::error_code ec;
  const auto remove_matching = [&](const fs::path& folder, bool (*ours)(const std::string&)) {
    std::vector<fs::path> doomed;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
      if (ours(it->path().filename().string())) doomed.push_back(it->path());
    for (const fs::path& p : doomed) {
      std::error_code ec2;
      if (fs::is_directory(p, ec2)) freed += tree_bytes(p);
      else if (const std::uintmax_t n = fs::file_size(p, ec2); !ec2) freed += n;
      fs::remove_all(p, ec2);
    }
    ec.clear();
  };
  remove_matching(dir_, [](const std::string& n) { return is_key(n); });
  remove_matching(fs::path(dir_) / "tune", is_record_file);
  remove_matching(fs::path(dir_) / "compilers", is_record_file);
  remove_matching(fs::path(dir_) / "tmp", is_scratch);
  for (const char* sub : {"tune", "compilers"}) fs::remove(fs::path(dir_) / sub, ec);  // only when empty
  fs::create_directories(fs::path(dir_) / "tmp", ec);
  return freed;
}

void KernelCache::evict(const std::string& keep) {
  struct Item {
    std::string key;
    std::uint64_t bytes;
    std::int64_t mtime_ns;
  };
  std::vector<Item> items;
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_key(name)) continue;
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0) continue;
    const std::uint64_t b = tree_bytes(it->path());
    total += b;
    items.push_back({name, b, std::int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  if (total <= max_bytes_) return;
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.mtime_ns < b.mtime_ns; });
  for (const auto& item : items) {
    if (total <= max_bytes_) break;
    if (item.key == keep) continue;
    const fs::path from = fs::path(dir_) / item.key;
    const fs::path trash = fs::path(dir_) / "tmp" / ("evict-" + item.key + "-" + std::to_string(::getpid()));
    if (::rename(from.c_str(), trash.c_str()) == 0) fs::remove_all(trash, ec);
    total -= std::min(total, item.bytes);
  }
}

std::optional<std::string> KernelCache::read_tuning(const std::string& tune_key) const {
  std::ifstream in(fs::path(dir_) / "tune" / tune_key);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string v = ss.str();
  if (v.empty() || v.back() != '\n') return std::nullopt;  // incomplete: treat as absent
  v.pop_back();
  return v;
}

void KernelCache::write_tuning(const std::string& tune_key, const std::string& value) {
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "tune", ec);
  detail::write_file_atomic((fs::path(dir_) / "tune" / tune_key).string(), value + "\n");
}

}  // namespace lmcore::codegen
