// lmcore/base/atomic_file.h — write a file so that readers see either the old content or the complete
// new one, never a torn mix, and a killed writer leaves no litter that accumulates.
//
//   base::AtomicFile out("ckpt/model.safetensors", {.what = "save"});
//   out.write(header);
//   out.write(data, n);
//   out.commit();                        // without commit() the destructor discards everything
//
//   base::write_file_atomically("run/config.json", text);   // the one-shot form
//
// How (one sequence, every writer in lmcore goes through it):
//  1. The destination is checked with lstat(2): it may be missing or a regular file. Anything else is
//     refused before a byte is written: a directory, a FIFO, a character or block device (writing
//     "onto /dev/null" must not replace /dev/null) or a socket. A SYMBOLIC LINK IS REFUSED too: an
//     atomic rename would replace the link itself with a file, silently cutting it from its target, and
//     writing through it would change a file that other links (a model cache, say) may share. The
//     message names the link's target, so the caller can pass that path instead.
//  2. Stale temporaries of the same destination are swept (below).
//  3. The bytes go to "<dest>.tmp.<pid>.<6 random characters>" in the destination's directory (so the
//     rename cannot cross file systems), created with O_EXCL and mode 0666 & ~umask (or the replaced
//     file's mode with keep_mode), and held under flock(LOCK_EX) while it exists.
//  4. commit(): flush, fsync the file, check the destination once more (step 1), rename over it, fsync
//     the directory so the rename itself survives a power cut (durable = false skips both fsyncs, for
//     diagnostics that must only outlive the process).
//
// Litter: the destructor removes an uncommitted temporary (exceptions, early returns). SIGTERM and
// SIGINT, when the program left them at their default action, are caught by a handler that unlinks
// every live temporary and then re-raises the signal with the default action, so the process still
// dies of that signal. Nothing runs on SIGKILL or a power cut, so the next AtomicFile for the same
// destination sweeps: a "<dest>.tmp.<pid>.<xxxxxx>" owned by this user whose lock can be taken (no
// live writer holds it) is removed if its pid is gone or it is older than a minute (the minute covers
// the instant between another writer's create and its flock, and temporaries from another host on a
// shared file system).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lmcore::base {

struct AtomicFileOptions {
  // Prefix of error messages: "<what>: ..." (e.g. "save", "convert"); empty leaves it out.
  std::string what = "write";
  // fsync the file before the rename and the directory after it.
  bool durable = true;
  // Give the new file the permission bits of the file it replaces (a source file rewritten by a
  // fixer keeps its executable bit); otherwise 0666 & ~umask, as a plain create would.
  bool keep_mode = false;
};

class AtomicFile {
 public:
  // Checks the destination (step 1 above), sweeps, creates the temporary. Throws lmcore::Error.
  explicit AtomicFile(std::string path, AtomicFileOptions options = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void write_zeros(std::size_t n);
  // Bytes written so far.
  std::uint64_t offset() const { return offset_; }
  // Makes the new content visible at the destination (see above). Throws lmcore::Error; after a
  // failure the destination is unchanged and the temporary is removed by the destructor.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush();
  void write_direct(const void* data, std::size_t n);
  std::string path_, temp_path_;
  AtomicFileOptions options_;
  int fd_ = -1;
  int slot_ = -1;  // index in the signal-time cleanup table, or -1
  std::uint64_t offset_ = 0;
  std::string buffer_;
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes, AtomicFileOptions options = {});

// Removes the stale temporaries of `path` (the rule above); returns how many. AtomicFile calls it; it
// is public for tools that clean up and for tests.
std::size_t sweep_stale_temporaries(const std::string& path);

// Refuses a destination that is not missing and not a regular file (step 1 above): throws
// lmcore::Error "<what>: '<path>' is a FIFO, not a regular file; refusing to replace it".
void check_replaceable(const std::string& path, std::string_view what);

// Before long work whose result goes to `path` (training a tokenizer, converting a large checkpoint):
// check_replaceable, and the directory AtomicFile would create its temporary in exists, is a
// directory and is writable, so that a typo in the output path costs nothing. Throws lmcore::Error.
void check_can_create(const std::string& path, std::string_view what);

}  // namespace lmcore::base
