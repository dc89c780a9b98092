#include "lmcore/train/builtin_corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "lmcore/core/error.h"
#include "lmcore/core/progress.h"
#include "lmcore/io/token_shard.h"

namespace lmcore::train {

namespace fs = std::filesystem;

std::string default_corpus_cache_dir() {
  if (const char* d = std::getenv("LMCORE_CACHE_DIR"); d && *d) return (fs::path(d) / "corpus").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return (fs::path(d) / "lmcore" / "corpus").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".cache" / "lmcore" / "corpus").string();
}

namespace {

constexpr std::int64_t kByteVocab = 257;  // 256 bytes + end-of-text
constexpr std::uint32_t kEot = 256;

std::uint64_t fnv1a(std::uint64_t h, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}

fs::path find_stdlib() {
  const std::regex name(R"(python3\.(\d+))");
  fs::path best;
  int best_minor = -1;
  for (const char* root : {"/usr/lib", "/usr/local/lib"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      std::smatch m;
      const std::string n = e.path().filename().string();
      if (e.is_directory() && std::regex_match(n, m, name) && fs::exists(e.path() / "os.py")) {
        const int minor = std::stoi(m[1]);
        if (minor > best_minor) best_minor = minor, best = e.path();
      }
    }
  }
  LMCORE_CHECK(!best.empty(),
               "built-in corpus: no Python standard library found (looked for /usr/lib/python3.N/os.py and "
               "/usr/local/lib/python3.N/os.py); install python3 or pass --data GLOB");
  return best;
}

}  // namespace

PreparedData prepare_builtin_corpus(const std::string& cache_dir, bool verbose) {
  const fs::path stdlib = find_stdlib();
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(stdlib, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    // site-packages/dist-packages belong to other projects, not the standard library.
    if (it->is_directory() && (it->path().filename() == "site-packages" || it->path().filename() == "dist-packages")) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".py") files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  LMCORE_CHECK(!files.empty(), "built-in corpus: no .py files under {}", stdlib.string());
  std::uint64_t key = 0xcbf29ce484222325ull;
  std::uint64_t total_bytes = 0;
  for (const fs::path& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) continue;
    key = fnv1a(key, f.c_str(), f.string().size());
    key = fnv1a(key, &st.st_size, sizeof(st.st_size));
    key = fnv1a(key, &st.st_mtime, sizeof(st.st_mtime));
    total_bytes += static_cast<std::uint64_t>(st.st_size);
  }
  const fs::path dir = fs::path(cache_dir) / fmt::format("{}-bytes-{:016x}", stdlib.filename().string(), key);
  PreparedData d;
  d.train_glob = (dir / "stdlib_train_*.bin").string();
  d.val_glob = (dir / "stdlib_val_*.bin").string();
  d.vocab_size = kByteVocab;
  d.eos_token = kEot;
  d.description = fmt::format("{} ({} .py files, {:.1f} MB), byte-level tokens", stdlib.string(), files.size(),
                              static_cast<double>(total_bytes) / 1e6);
  const fs::path train_file = dir / "stdlib_train_000000.bin", val_file = dir / "stdlib_val_000000.bin";
  if (fs::is_regular_file(train_file) && fs::is_regular_file(val_file)) {
    d.train_tokens = io::TokenShard::open(train_file.string()).size();
    d.val_tokens = io::TokenShard::open(val_file.string()).size();
    return d;
  }
  fs::create_directories(dir);
  std::vector<std::uint32_t> train, val;
  train.reserve(total_bytes + files.size());
  Progress progress("built-in corpus", static_cast<std::int64_t>(files.size()), "files", verbose ? stderr : nullptr);
  std::vector<char> buf;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::ifstream in(files[i], std::ios::binary);
    if (!in) continue;
    buf.assign(std::istreambuf_iterator<char>(in), {});
    const std::string p = files[i].string();
    auto& out = fnv1a(0xcbf29ce484222325ull, p.data(), p.size()) % 100 == 0 ? val : train;
    out.push_back(kEot);
    for (char c : buf) out.push_back(static_cast<unsigned char>(c));
    progress.update(static_cast<std::int64_t>(i + 1), fmt::format("{:.1f} M tokens", static_cast<double>(train.size() + val.size()) / 1e6));
  }
  progress.finish();
  // Shards hold at most 2^31 - 1 tokens (an int32 count in the header): far above this corpus.
  io::write_token_shard(val_file.string(), val.data(), static_cast<std::int64_t>(val.size()), kByteVocab);
  io::write_token_shard(train_file.string(), train.data(), static_cast<std::int64_t>(train.size()), kByteVocab);
  d.train_tokens = static_cast<std::int64_t>(train.size());
  d.val_tokens = static_cast<std::int64_t>(val.size());
  return d;
}

}  // namespace lmcore::train
