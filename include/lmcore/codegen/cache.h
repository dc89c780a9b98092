// lmcore/codegen/cache.h — the on-disk cache of compiled kernels and of autotuning results.
//
// Layout of $LMCORE_CACHE_DIR (default ~/.cache/lmcore/kernels):
//   <key>/kernel.so     the library; key = sha256 of ABI version, source, compiler path and version,
//                       flags and CPU features (first 40 hex digits)
//   <key>/kernel.cpp    the source it was built from (for people; not read back)
//   <key>/meta          "name value" lines: sha256 and size of kernel.so, kind, spec, variant, compiler
//   tune/<hash>         an autotuning winner: "variant ..." for one spec on one CPU and compiler
//   compilers/<hash>    a compiler's --version line, by path, inode, size and mtime (saves a process
//                       start per run: most of a warm load)
//   tmp/                staging directories and entries being removed
// An entry is built in tmp/, its files fsync'ed, then the directory is renamed to <key>: a reader sees
// a whole entry or none, and when two processes race on one key the second rename fails and the loser
// uses the winner's entry. The entry's mtime is its last use (touched on every load); beyond the size
// limit the least recently used entries are removed. An entry whose kernel.so does not match its meta
// (a truncated or overwritten file) is removed on lookup and rebuilt by the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lmcore::codegen {

struct CacheEntry {
  std::string key, kind, spec, variant, compiler;
  std::uint64_t bytes = 0;      // all files of the entry
  std::int64_t last_use = 0;    // unix seconds
  bool valid = false;           // kernel.so matches its recorded checksum
};

class KernelCache {
 public:
  KernelCache(std::string dir, std::uint64_t max_bytes);
  const std::string& dir() const { return dir_; }
  // ~/.cache/lmcore/kernels ($HOME unset: /tmp/lmcore-kernels-<uid>).
  static std::string default_dir();

  // The path of the entry's kernel.so after verifying it against its meta, and its last use touched.
  // nullopt when absent; when present but corrupt the entry is removed and *why says what was wrong.
  std::optional<std::string> lookup(const std::string& key, std::string* why = nullptr);

  // A fresh staging directory (in tmp/) for building an entry.
  std::string stage();
  // Installs a staged directory holding kernel.so (and kernel.cpp): writes meta with the checksum,
  // fsyncs and renames it to <key>. Returns the installed kernel.so path — another process's when it
  // won the race. Evicts least recently used entries beyond the size limit (never `key` itself).
  std::string install(const std::string& staged, const std::string& key, const std::string& kind,
                      const std::string& spec, const std::string& variant, const std::string& compiler);

  std::vector<CacheEntry> list() const;
  // Removes every entry, tuning record, compiler record and staging directory, and nothing else that
  // the directory holds (files of its own names only); returns the bytes freed.
  std::uint64_t clear();
  // Removes least recently used entries until the total is within the limit, sparing `keep`.
  void evict(const std::string& keep = "");

  // Autotuning records: a small text value per tuning key, written atomically.
  std::optional<std::string> read_tuning(const std::string& tune_key) const;
  void write_tuning(const std::string& tune_key, const std::string& value);

 private:
  std::string dir_;
  std::uint64_t max_bytes_;
};

namespace detail {
// Writes a file atomically: a temporary in the same directory, fsync, rename, fsync of the directory.
void write_file_atomic(const std::string& path, const std::string& bytes);
// The CPU's feature flags (the "flags" line of /proc/cpuinfo), part of every cache key.
const std::string& cpu_features();
}  // namespace detail

}  // namespace lmcore::codegen
