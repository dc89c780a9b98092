// Text files -> token shards. The layout and the split rules are in include/lmcore/text/tokenize_files.h.
#include "lmcore/text/tokenize_files.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"
#include "lmcore/core/progress.h"
#include "lmcore/io/token_shard.h"
#include "src/io/file_util.h"

namespace lmcore::text {

namespace {

namespace fs = std::filesystem;

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// Appends tokens and writes a shard each time shard_tokens are buffered.
class ShardStream {
 public:
  ShardStream(std::string pattern, std::int64_t shard_tokens, std::int64_t vocab_size)
      : pattern_(std::move(pattern)), shard_tokens_(shard_tokens), vocab_size_(vocab_size) {}
  void append(const std::uint32_t* t, std::size_t n) {
    while (n > 0) {
      const std::size_t room = static_cast<std::size_t>(shard_tokens_) - buf_.size();
      const std::size_t k = std::min(room, n);
      buf_.insert(buf_.end(), t, t + k);
      t += k, n -= k, total_ += static_cast<std::int64_t>(k);
      if (buf_.size() == static_cast<std::size_t>(shard_tokens_)) flush();
    }
  }
  void flush() {
    if (buf_.empty()) return;
    const std::string path = fmt::format(fmt::runtime(pattern_), files_.size());
    io::write_token_shard(path, buf_.data(), static_cast<std::int64_t>(buf_.size()), vocab_size_);
    files_.push_back(path);
    buf_.clear();
  }
  std::int64_t total() const { return total_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string pattern_;
  std::int64_t shard_tokens_, vocab_size_;
  std::vector<std::uint32_t> buf_;
  std::vector<std::string> files_;
  std::int64_t total_ = 0;
};

struct Window {
  std::size_t file;
  std::size_t begin, end;
  bool val;
  bool starts_document;
};

}  // namespace

TokenizeResult tokenize_files(const Tokenizer& tok, const std::vector<std::string>& files, const TokenizeOptions& o) {
  // 1. arguments
  LMCORE_CHECK(!files.empty(), "tokenize: no input files");
  LMCORE_CHECK(!o.out_dir.empty(), "tokenize: no output folder (--out-dir)");
  LMCORE_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "tokenize: --val-fraction must lie in [0, 1), found {}",
               o.val_fraction);
  LMCORE_CHECK(o.shard_tokens >= 1 && o.shard_tokens <= INT32_MAX,
               "tokenize: --shard-tokens must lie in [1, 2^31 - 1] (an int32 count in the shard header), found {}",
               o.shard_tokens);
  std::uint32_t eot;
  if (o.eot.empty()) {
    const auto id = tok.end_of_text_id();
    LMCORE_CHECK(id.has_value(),
                 "tokenize: the tokenizer has none of the special tokens <|endoftext|>, <|end_of_text|>, </s>, <eos>; "
                 "name the document separator with --eot");
    eot = *id;
  } else {
    const auto id = tok.token_to_id(o.eot);
    LMCORE_CHECK(id.has_value(), "tokenize: --eot '{}' is not a token of the tokenizer", o.eot);
    eot = *id;
  }
  // A file given twice (under one name or two, or through a link) would be one document in both
  // splits when the hash sends its copies different ways: validation would score training text.
  std::map<base::FileId, std::size_t> seen;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto id = base::file_id(files[i]);
    if (!id) continue;  // opening it below names the error
    const auto [it, fresh] = seen.try_emplace(*id, i);
    LMCORE_CHECK(fresh, "tokenize: '{}' (file {}) is the same file as '{}' (file {}); give each document once",
                 files[i], i + 1, files[it->second], it->second + 1);
  }
  base::create_directories(o.out_dir, "tokenize --out-dir");
  for (const auto& e : fs::directory_iterator(o.out_dir)) {
    const std::string n = e.path().filename().string();
    for (const char* split : {"train_", "val_"})
      if (n.rfind(o.prefix + split, 0) == 0 && e.path().extension() == ".bin")
        fail("tokenize: '{}' already holds token shards ({}); choose an empty folder or remove them", o.out_dir, n);
  }
  const auto t0 = std::chrono::steady_clock::now();
  TokenizeResult r;

  // 2. map the files
  std::vector<std::shared_ptr<io::detail::FileBytes>> mapped;
  std::vector<std::string_view> text;
  for (const std::string& f : files) {
    LMCORE_CHECK(!fs::is_directory(f), "tokenize: '{}' is a folder; pass the files (e.g. DIR/*.txt)", f);
    mapped.push_back(io::detail::FileBytes::open(f, /*use_mmap=*/true));
    const auto b = mapped.back()->bytes();
    text.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
    r.bytes += b.size();
  }

  // 3. the validation split
  std::vector<bool> val_doc(files.size(), false);
  std::size_t single_cut = SIZE_MAX;  // one file: its bytes from here on are validation
  if (o.val_fraction > 0) {
    if (files.size() >= 2) {
      std::vector<std::pair<std::uint64_t, std::size_t>> h;
      for (std::size_t i = 0; i < files.size(); ++i) h.emplace_back(fnv1a(files[i]), i);
      const auto limit = static_cast<std::uint64_t>(o.val_fraction * 18446744073709551616.0);
      std::size_t chosen = 0;
      for (const auto& [v, i] : h)
        if (v < limit) val_doc[i] = true, ++chosen;
      if (chosen == 0) val_doc[std::min_element(h.begin(), h.end())->second] = true;
      if (chosen == files.size()) val_doc[std::max_element(h.begin(), h.end())->second] = false;
    } else {
      const std::string_view t = text[0];
      const auto at = static_cast<std::size_t>(static_cast<double>(t.size()) * (1 - o.val_fraction));
      if (at > 0 && at < t.size()) {
        // The first line start at or after `at`; else `at` moved to a UTF-8 character start.
        const std::size_t nl = t.find('\n', at > 0 ? at - 1 : 0);
        single_cut = nl != std::string_view::npos && nl + 1 < t.size() ? nl + 1 : at;
        while (single_cut < t.size() && (static_cast<unsigned char>(t[single_cut]) & 0xC0) == 0x80) ++single_cut;
        if (single_cut >= t.size()) single_cut = SIZE_MAX;
      }
    }
  }

  // 4. windows of at most ~batch_bytes (long files cut where the ids are unchanged)
  std::vector<Window> windows;
  const std::size_t target = std::max<std::size_t>(o.batch_bytes, 1 << 16);
  for (std::size_t f = 0; f < files.size(); ++f) {
    auto add_doc = [&](std::size_t begin, std::size_t end, bool val) {
      std::size_t b = begin;
      bool first = true;
      if (end - begin > target)
        for (std::size_t c : tok.cut_points(text[f].substr(begin, end - begin), target)) {
          windows.push_back({f, b, begin + c, val, first});
          b = begin + c, first = false;
        }
      windows.push_back({f, b, end, val, first});
    };
    if (f == 0 && single_cut != SIZE_MAX) {
      add_doc(0, single_cut, false);
      add_doc(single_cut, text[f].size(), true);
    } else {
      add_doc(0, text[f].size(), val_doc[f]);
    }
  }

  // 5. encode batch by batch, in order
  const std::string prefix = (fs::path(o.out_dir) / o.prefix).string();
  ShardStream train(prefix + "train_{:06d}.bin", o.shard_tokens, tok.vocab_size());
  ShardStream val(prefix + "val_{:06d}.bin", o.shard_tokens, tok.vocab_size());
  Progress progress("tokenize", static_cast<std::int64_t>(r.bytes >> 20), "MiB", o.progress);
  std::uint64_t done = 0;
  for (std::size_t w = 0; w < windows.size();) {
    std::size_t e = w, bytes = 0;
    while (e < windows.size() && (e == w || bytes + (windows[e].end - windows[e].begin) <= target)) {
      bytes += windows[e].end - windows[e].begin;
      ++e;
    }
    std::vector<std::string_view> views;
    for (std::size_t i = w; i < e; ++i) views.push_back(text[windows[i].file].substr(windows[i].begin, windows[i].end - windows[i].begin));
    const auto ids = tok.encode_batch(std::span<const std::string_view>(views));
    for (std::size_t i = w; i < e; ++i) {
      ShardStream& s = windows[i].val ? val : train;
      if (windows[i].starts_document) {
        s.append(&eot, 1);
        ++r.documents;
        if (windows[i].val) ++r.val_documents;
      }
      s.append(ids[i - w].data(), ids[i - w].size());
    }
    done += bytes;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress.update(static_cast<std::int64_t>(done >> 20),
                    fmt::format("{:.1f} MB/s, {} tokens", secs > 0 ? static_cast<double>(done) / 1e6 / secs : 0.0,
                                train.total() + val.total()));
    w = e;
  }
  train.flush();
  val.flush();
  progress.finish();

  // 6. the tokenizer beside the shards
  r.tokenizer_file = (fs::path(o.out_dir) / "tokenizer.json").string();
  tok.save(r.tokenizer_file);
  r.train_tokens = train.total();
  r.val_tokens = val.total();
  r.train_shards = train.files();
  r.val_shards = val.files();
  r.train_glob = prefix + "train_*.bin";
  r.val_glob = prefix + "val_*.bin";
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace lmcore::text
