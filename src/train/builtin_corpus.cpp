#include "lmcore/train/builtin_corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"
#include "lmcore/core/progress.h"
#include "lmcore/io/token_shard.h"
#include "lmcore/text/tokenizer.h"
#include "lmcore/text/train.h"

namespace lmcore::train {

namespace fs = std::filesystem;

std::string default_corpus_cache_dir() {
  if (const char* d = std::getenv("LMCORE_CACHE_DIR"); d && *d) return (fs::path(d) / "corpus").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return (fs::path(d) / "lmcore" / "corpus").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".cache" / "lmcore" / "corpus").string();
}

namespace {

// The tokenizer: byte-level BPE (GPT-2's split) trained on the train split, 4096 tokens with the
// end-of-text token last. A few thousand tokens keep the embedding small next to the ~10M-parameter model
// while a token carries ~3.5 bytes of Python instead of one.
constexpr std::int64_t kVocab = 4096;
constexpr const char* kEotText = "<|endoftext|>";

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
  const fs::path dir = fs::path(cache_dir) / fmt::format("{}-bpe{}-{:016x}", stdlib.filename().string(), kVocab, key);
  PreparedData d;
  d.train_glob = (dir / "stdlib_train_*.bin").string();
  d.val_glob = (dir / "stdlib_val_*.bin").string();
  d.tokenizer_file = (dir / "tokenizer.json").string();
  d.vocab_size = kVocab;
  const fs::path train_file = dir / "stdlib_train_000000.bin", val_file = dir / "stdlib_val_000000.bin";
  auto describe = [&] {
    d.description = fmt::format("{} ({} .py files, {:.1f} MB), BPE tokens (vocab {}, {:.2f} bytes/token)",
                                stdlib.string(), files.size(), static_cast<double>(total_bytes) / 1e6, kVocab,
                                static_cast<double>(total_bytes) / static_cast<double>(std::max<std::int64_t>(1, d.train_tokens + d.val_tokens)));
  };
  // Cached: the tokenizer is written before the shards and each file atomically, so all three present
  // means a finished build.
  if (fs::is_regular_file(d.tokenizer_file) && fs::is_regular_file(train_file) && fs::is_regular_file(val_file)) {
    const text::Tokenizer tok = text::Tokenizer::from_file(d.tokenizer_file);
    const auto eot = tok.end_of_text_id();
    LMCORE_CHECK(eot.has_value() && tok.vocab_size() == kVocab,
                 "built-in corpus: {} is not the cached tokenizer (no <|endoftext|> or not {} tokens); remove {} to "
                 "rebuild it", d.tokenizer_file, kVocab, dir.string());
    d.eos_token = *eot;
    d.train_tokens = io::TokenShard::open(train_file.string(), kVocab).size();
    d.val_tokens = io::TokenShard::open(val_file.string(), kVocab).size();
    describe();
    return d;
  }
  base::create_directories(dir.string(), "built-in corpus cache");
  // 1. read the documents; about 1% of them, chosen by a hash of the path, are the validation split.
  std::vector<std::string> docs;
  std::vector<bool> is_val;
  docs.reserve(files.size());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) continue;
    docs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    const std::string p = f.string();
    is_val.push_back(fnv1a(0xcbf29ce484222325ull, p.data(), p.size()) % 100 == 0);
  }
  // 2. the tokenizer, trained on the training documents only.
  std::vector<std::string_view> train_docs;
  for (std::size_t i = 0; i < docs.size(); ++i)
    if (!is_val[i]) train_docs.emplace_back(docs[i]);
  text::BpeTrainOptions to;
  to.vocab_size = kVocab;
  to.special_tokens = {kEotText};
  to.progress = verbose ? stderr : nullptr;
  const text::Tokenizer tok = text::train_bpe_texts(train_docs, to);
  tok.save(d.tokenizer_file);
  const std::uint32_t eot = *tok.end_of_text_id();
  d.eos_token = eot;
  // 3. the shards: each document preceded by the end-of-text token, as llm.c separates documents.
  std::vector<std::uint32_t> train, val;
  train.reserve(total_bytes / 3);
  Progress progress("built-in corpus: tokenize", static_cast<std::int64_t>(docs.size()), "files", verbose ? stderr : nullptr);
  constexpr std::size_t kBatch = 64;
  for (std::size_t b = 0; b < docs.size(); b += kBatch) {
    const std::size_t e = std::min(docs.size(), b + kBatch);
    std::vector<std::string_view> batch(docs.begin() + static_cast<std::ptrdiff_t>(b), docs.begin() + static_cast<std::ptrdiff_t>(e));
    const auto ids = tok.encode_batch(std::span<const std::string_view>(batch));
    for (std::size_t i = b; i < e; ++i) {
      auto& out = is_val[i] ? val : train;
      out.push_back(eot);
      out.insert(out.end(), ids[i - b].begin(), ids[i - b].end());
    }
    progress.update(static_cast<std::int64_t>(e), fmt::format("{:.1f} M tokens", static_cast<double>(train.size() + val.size()) / 1e6));
  }
  progress.finish();
  // Shards hold at most 2^31 - 1 tokens (an int32 count in the header): far above this corpus.
  io::write_token_shard(val_file.string(), val.data(), static_cast<std::int64_t>(val.size()), kVocab);
  io::write_token_shard(train_file.string(), train.data(), static_cast<std::int64_t>(train.size()), kVocab);
  d.train_tokens = static_cast<std::int64_t>(train.size());
  d.val_tokens = static_cast<std::int64_t>(val.size());
  describe();
  return d;
}

}  // namespace lmcore::train
