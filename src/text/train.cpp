// BPE training: parallel piece counting, then merges with incremental pair counts. The algorithm is at
// the top of include/lmcore/text/train.h.
//
// Merge-phase tables (W distinct pieces, S their total bytes, P distinct adjacent pairs):
//   sym[word_begin[w] .. + word_len[w])   the current tokens of word w (S entries, rewritten in place)
//   word_count[w]                          occurrences of the piece in the corpus
//   pairs: key (left << 32 | right) -> index k, with count[k] (sum over words of occurrences x count)
//          and words[k], the words that held the pair when it was counted (may hold stale entries)
//   heap of (count, key), max count first, smallest key among equal counts; an entry whose count is
//          no longer the pair's is re-pushed with the current count when popped (lazy deletion)
#include "lmcore/text/train.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <queue>
#include <unordered_map>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "lmcore/core/progress.h"
#include "src/io/file_util.h"
#include "src/text/byte_level.h"
#include "src/text/tokenizer_data.h"

namespace lmcore::text {

namespace {

using detail::AddedMatcher;
using detail::PieceCache;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// piece -> count; keys point into the corpus, which outlives the table.
class PieceCounter {
 public:
  struct Entry {
    std::uint64_t hash = 0;  // 0: empty
    const char* data = nullptr;
    std::size_t size = 0;
    std::uint64_t count = 0;
  };
  PieceCounter() : table_(1 << 12) {}
  void add(std::string_view s, std::uint64_t n) { add_hashed(s, PieceCache::hash(s), n); }
  void add_hashed(std::string_view s, std::uint64_t h, std::uint64_t n) {
    if (used_ * 2 >= table_.size()) grow();
    const std::size_t mask = table_.size() - 1;
    std::size_t i = h & mask;
    while (true) {
      Entry& e = table_[i];
      if (e.hash == 0) {
        e = {h, s.data(), s.size(), n};
        ++used_;
        return;
      }
      if (e.hash == h && e.size == s.size() && std::memcmp(e.data, s.data(), s.size()) == 0) {
        e.count += n;
        return;
      }
      i = (i + 1) & mask;
    }
  }
  const std::vector<Entry>& entries() const { return table_; }
  std::size_t size() const { return used_; }

 private:
  void grow() {
    std::vector<Entry> old(table_.size() * 2);
    old.swap(table_);
    const std::size_t mask = table_.size() - 1;
    for (const Entry& e : old) {
      if (e.hash == 0) continue;
      std::size_t i = e.hash & mask;
      while (table_[i].hash != 0) i = (i + 1) & mask;
      table_[i] = e;
    }
  }
  std::vector<Entry> table_;
  std::size_t used_ = 0;
};

// key -> index into the pair arrays (open addressing, grows).
class PairIndex {
 public:
  PairIndex() : keys_(1 << 16, kEmpty), vals_(1 << 16) {}
  // Index of key, or -1.
  std::int64_t find(std::uint64_t key) const {
    std::size_t i = slot(key);
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return vals_[i];
      i = (i + 1) & (keys_.size() - 1);
    }
    return -1;
  }
  // Index of key, inserting `next` when absent (then `inserted` is set).
  std::uint32_t get(std::uint64_t key, std::uint32_t next, bool& inserted) {
    if (used_ * 2 >= keys_.size()) grow();
    std::size_t i = slot(key);
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) {
        inserted = false;
        return vals_[i];
      }
      i = (i + 1) & (keys_.size() - 1);
    }
    keys_[i] = key;
    vals_[i] = next;
    ++used_;
    inserted = true;
    return next;
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  std::size_t slot(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void grow() {
    std::vector<std::uint64_t> ok(keys_.size() * 2, kEmpty);
    std::vector<std::uint32_t> ov(keys_.size() * 2);
    ok.swap(keys_);
    ov.swap(vals_);
    --shift_;
    for (std::size_t j = 0; j < ok.size(); ++j) {
      if (ok[j] == kEmpty) continue;
      std::size_t i = slot(ok[j]);
      while (keys_[i] != kEmpty) i = (i + 1) & (keys_.size() - 1);
      keys_[i] = ok[j];
      vals_[i] = ov[j];
    }
  }
  std::vector<std::uint64_t> keys_;
  std::vector<std::uint32_t> vals_;
  int shift_ = 64 - 16;  // the top log2(size) bits of the product pick the slot
  std::size_t used_ = 0;
};

struct Corpus {
  std::vector<std::string_view> texts;
  std::vector<std::string> names;
};

// ---- 1. count ----

struct Counted {
  PieceCounter pieces;
  std::uint64_t total = 0;
};

Counted count_pieces(const Corpus& corpus, const SplitPattern& pattern, const BpeTrainOptions& o,
                     BpeTrainStats& stats) {
  AddedMatcher specials;
  bool cut = pattern.cuts_at_lines() && o.part_bytes > 0;
  for (std::size_t i = 0; i < o.special_tokens.size(); ++i) {
    specials.add(o.special_tokens[i], static_cast<std::uint32_t>(i));
    if (o.special_tokens[i].find('\n') != std::string::npos) cut = false;
  }
  struct Part {
    std::size_t text;
    Span span;
  };
  std::vector<Part> parts;
  std::uint64_t total_bytes = 0;
  for (std::size_t t = 0; t < corpus.texts.size(); ++t) {
    const std::string_view text = corpus.texts[t];
    total_bytes += text.size();
    std::size_t b = 0;
    if (cut && text.size() > o.part_bytes)
      for (std::size_t c : line_cuts(text, o.part_bytes)) {
        parts.push_back({t, {b, c}});
        b = c;
      }
    if (b < text.size()) parts.push_back({t, {b, text.size()}});
  }
  const int threads = std::max(1, std::min<int>(num_threads(), static_cast<int>(parts.size())));
  std::vector<std::unique_ptr<PieceCounter>> local(static_cast<std::size_t>(threads));
  std::vector<std::uint64_t> local_pieces(static_cast<std::size_t>(threads), 0);
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> done_bytes{0};
  const auto t0 = std::chrono::steady_clock::now();
  Progress progress("tokenizer train: count", static_cast<std::int64_t>(total_bytes >> 20), "MiB", o.progress);
  auto work = [&](std::int64_t w) {
    auto counter = std::make_unique<PieceCounter>();
    std::vector<Span> spans;
    std::uint64_t n_pieces = 0;
    auto count_segment = [&](std::string_view seg) {
      spans.clear();
      pattern.split(seg, spans);
      for (const Span& s : spans) counter->add(seg.substr(s.begin, s.size()), 1);
      n_pieces += spans.size();
    };
    for (std::size_t i = next++; i < parts.size(); i = next++) {
      const std::string_view text = corpus.texts[parts[i].text].substr(parts[i].span.begin, parts[i].span.size());
      std::size_t pos = 0;
      AddedMatcher::Match m;
      while (pos < text.size() && specials.find(text, pos, m)) {
        count_segment(text.substr(pos, m.begin - pos));
        pos = m.end;
      }
      count_segment(text.substr(pos));
      const std::uint64_t done = done_bytes += text.size();
      if (w == 0) {
        const double s = seconds_since(t0);
        progress.update(static_cast<std::int64_t>(done >> 20),
                        fmt::format("{:.1f} MB/s", s > 0 ? static_cast<double>(done) / 1e6 / s : 0.0));
      }
    }
    local[static_cast<std::size_t>(w)] = std::move(counter);
    local_pieces[static_cast<std::size_t>(w)] = n_pieces;
  };
  if (threads == 1 || in_parallel_region()) {
    work(0);
    for (int w = 1; w < threads; ++w) local[static_cast<std::size_t>(w)] = std::make_unique<PieceCounter>();
  } else {
    parallel_for(0, threads, 1, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t w = lo; w < hi; ++w) work(w);
    });
  }
  // Sum the per-thread tables into the largest one.
  std::size_t big = 0;
  for (std::size_t w = 1; w < local.size(); ++w)
    if (local[w]->size() > local[big]->size()) big = w;
  Counted out;
  out.pieces = std::move(*local[big]);
  for (std::size_t w = 0; w < local.size(); ++w) {
    if (w == big) continue;
    for (const auto& e : local[w]->entries())
      if (e.hash != 0) out.pieces.add_hashed({e.data, e.size}, e.hash, e.count);
    local[w].reset();
  }
  for (std::uint64_t n : local_pieces) stats.pieces += n;
  stats.bytes = total_bytes;
  stats.distinct_pieces = out.pieces.size();
  stats.count_seconds = seconds_since(t0);
  const double s = stats.count_seconds;
  progress.update(static_cast<std::int64_t>(total_bytes >> 20),
                  fmt::format("{:.1f} MB/s, {} pieces, {} distinct", s > 0 ? static_cast<double>(total_bytes) / 1e6 / s : 0.0,
                              stats.pieces, stats.distinct_pieces));
  progress.finish();
  return out;
}

// ---- 3. merge ----

struct HeapEntry {
  std::uint64_t count;
  std::uint64_t key;
  bool operator<(const HeapEntry& o) const {  // priority_queue pops the largest: max count, min key
    return count != o.count ? count < o.count : key > o.key;
  }
};

struct MergeResult {
  std::vector<std::string> token_bytes;  // id -> bytes
  std::vector<std::pair<std::uint32_t, std::uint32_t>> merges;
};

MergeResult merge_pairs(const PieceCounter& pieces, std::int64_t target_tokens, const BpeTrainOptions& o,
                        BpeTrainStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  MergeResult res;
  for (int b = 0; b < 256; ++b) res.token_bytes.emplace_back(1, static_cast<char>(b));
  std::unordered_map<std::string, std::uint32_t> token_id;
  for (int b = 0; b < 256; ++b) token_id.emplace(res.token_bytes[b], static_cast<std::uint32_t>(b));

  // 2. words
  std::vector<std::uint32_t> sym, word_begin, word_len;
  std::vector<std::uint64_t> word_count;
  std::size_t total_sym = 0;
  for (const auto& e : pieces.entries())
    if (e.hash != 0 && e.size >= 2) total_sym += e.size;
  sym.reserve(total_sym);
  for (const auto& e : pieces.entries()) {
    if (e.hash == 0 || e.size < 2) continue;  // one byte has no pair
    LMCORE_CHECK(e.size < (std::size_t{1} << 31), "tokenizer train: a piece of {} bytes is too long", e.size);
    word_begin.push_back(static_cast<std::uint32_t>(sym.size()));
    word_len.push_back(static_cast<std::uint32_t>(e.size));
    word_count.push_back(e.count);
    for (std::size_t i = 0; i < e.size; ++i) sym.push_back(static_cast<unsigned char>(e.data[i]));
    LMCORE_CHECK(sym.size() < (std::size_t{1} << 32), "tokenizer train: the distinct pieces hold more than 4 GiB");
  }
  const std::size_t n_words = word_len.size();

  // Pair tables.
  PairIndex index;
  std::vector<std::uint64_t> count, keys;
  std::vector<std::vector<std::uint32_t>> words;
  std::vector<std::uint32_t> increased_mark;  // the merge step that last listed the pair in `increased`
  auto pair_of = [&](std::uint32_t a, std::uint32_t b) -> std::uint32_t {
    bool inserted = false;
    const std::uint64_t key = (std::uint64_t{a} << 32) | b;
    const std::uint32_t k = index.get(key, static_cast<std::uint32_t>(count.size()), inserted);
    if (inserted) {
      count.push_back(0);
      keys.push_back(key);
      words.emplace_back();
      increased_mark.push_back(0);
    }
    return k;
  };
  for (std::size_t w = 0; w < n_words; ++w) {
    const std::uint32_t* s = sym.data() + word_begin[w];
    for (std::uint32_t i = 0; i + 1 < word_len[w]; ++i) {
      const std::uint32_t k = pair_of(s[i], s[i + 1]);
      count[k] += word_count[w];
      if (words[k].empty() || words[k].back() != w) words[k].push_back(static_cast<std::uint32_t>(w));
    }
  }
  std::priority_queue<HeapEntry> heap;
  {
    std::vector<HeapEntry> init(count.size());
    for (std::size_t k = 0; k < count.size(); ++k) init[k] = {count[k], keys[k]};
    heap = std::priority_queue<HeapEntry>(std::less<HeapEntry>(), std::move(init));
  }

  const std::int64_t wanted = std::max<std::int64_t>(0, target_tokens - 256);
  Progress progress("tokenizer train: merge", wanted, "merges", o.progress);
  const std::uint64_t min_count = static_cast<std::uint64_t>(std::max<std::int64_t>(1, o.min_frequency));
  std::vector<std::uint32_t> increased;
  auto add = [&](std::uint32_t a, std::uint32_t b, std::int64_t delta, std::uint32_t w, std::uint32_t step) {
    const std::uint32_t k = pair_of(a, b);
    count[k] = static_cast<std::uint64_t>(static_cast<std::int64_t>(count[k]) + delta);
    if (delta > 0) {
      if (words[k].empty() || words[k].back() != w) words[k].push_back(w);
      if (increased_mark[k] != step) increased_mark[k] = step, increased.push_back(k);
    }
  };
  std::int64_t n_tokens = 256;
  std::uint32_t step = 0;
  while (n_tokens < target_tokens && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const auto k = static_cast<std::uint32_t>(index.find(top.key));
    if (count[k] != top.count) {
      if (count[k] > 0) heap.push({count[k], top.key});
      continue;
    }
    if (top.count < min_count) break;
    const auto left = static_cast<std::uint32_t>(top.key >> 32), right = static_cast<std::uint32_t>(top.key);
    std::string merged = res.token_bytes[left] + res.token_bytes[right];
    std::uint32_t id;
    if (const auto it = token_id.find(merged); it != token_id.end()) {
      id = it->second;
    } else {
      id = static_cast<std::uint32_t>(res.token_bytes.size());
      token_id.emplace(merged, id);
      res.token_bytes.push_back(std::move(merged));
      ++n_tokens;
    }
    res.merges.emplace_back(left, right);
    ++step;
    increased.clear();
    std::vector<std::uint32_t> ws = std::move(words[k]);
    words[k].clear();
    std::sort(ws.begin(), ws.end());
    ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
    for (const std::uint32_t w : ws) {
      std::uint32_t* s = sym.data() + word_begin[w];
      const std::uint32_t len = word_len[w];
      const auto c = static_cast<std::int64_t>(word_count[w]);
      std::uint32_t out = 0;
      for (std::uint32_t i = 0; i < len;) {
        if (i + 1 < len && s[i] == left && s[i + 1] == right) {
          // s[out-1] is the (already rewritten) left neighbour, s[i+2] the right one.
          if (out > 0) add(s[out - 1], left, -c, w, step), add(s[out - 1], id, c, w, step);
          if (i + 2 < len) add(right, s[i + 2], -c, w, step), add(id, s[i + 2], c, w, step);
          add(left, right, -c, w, step);
          s[out++] = id;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      word_len[w] = out;
    }
    for (const std::uint32_t p : increased)
      if (count[p] > 0) heap.push({count[p], keys[p]});
    if ((res.merges.size() & 63) == 0) {
      const double s = seconds_since(t0);
      progress.update(n_tokens - 256, fmt::format("{:.0f} merges/s", s > 0 ? static_cast<double>(res.merges.size()) / s : 0.0));
    }
  }
  stats.merges = static_cast<std::int64_t>(res.merges.size());
  stats.merge_seconds = seconds_since(t0);
  progress.update(n_tokens - 256, fmt::format("{:.0f} merges/s", stats.merge_seconds > 0
                                                                      ? static_cast<double>(res.merges.size()) / stats.merge_seconds
                                                                      : 0.0));
  progress.finish();
  return res;
}

Tokenizer train_corpus(const Corpus& corpus, const BpeTrainOptions& o, BpeTrainStats* stats_out) {
  const auto n_special = static_cast<std::int64_t>(o.special_tokens.size());
  LMCORE_CHECK(o.vocab_size >= 256 + n_special && o.vocab_size <= (1 << 24),
               "tokenizer train: vocab_size {} must lie in [256 bytes + {} special tokens, 2^24]", o.vocab_size,
               n_special);
  for (std::size_t i = 0; i < o.special_tokens.size(); ++i) {
    LMCORE_CHECK(!o.special_tokens[i].empty(), "tokenizer train: special token {} is empty", i);
    for (std::size_t j = 0; j < i; ++j)
      LMCORE_CHECK(o.special_tokens[i] != o.special_tokens[j], "tokenizer train: special token '{}' is given twice",
                   o.special_tokens[i]);
  }
  const SplitPattern pattern = SplitPattern::from_name(o.pattern);
  BpeTrainStats stats;
  const Counted counted = count_pieces(corpus, pattern, o, stats);
  const MergeResult m = merge_pairs(counted.pieces, o.vocab_size - n_special, o, stats);
  // 4. assemble and check (TokenizerData::build validates the result like any tokenizer.json).
  std::vector<std::pair<std::string, std::uint32_t>> vocab;
  vocab.reserve(m.token_bytes.size());
  for (std::size_t id = 0; id < m.token_bytes.size(); ++id)
    vocab.emplace_back(detail::bytes_to_byte_level(m.token_bytes[id]), static_cast<std::uint32_t>(id));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m.merges.size());
  for (const auto& [a, b] : m.merges) merges.emplace_back(vocab[a].first, vocab[b].first);
  std::vector<AddedToken> added;
  for (std::size_t i = 0; i < o.special_tokens.size(); ++i) {
    AddedToken a;
    a.id = static_cast<std::uint32_t>(m.token_bytes.size() + i);
    a.content = o.special_tokens[i];
    a.special = true;
    added.push_back(std::move(a));
  }
  if (stats_out) *stats_out = stats;
  return detail::TokenizerData::wrap(detail::TokenizerData::build(
      vocab, merges, std::move(added), PreTokenizerConfig::from_name(o.pattern), "trained tokenizer"));
}

}  // namespace

Tokenizer train_bpe_texts(const std::vector<std::string_view>& texts, const BpeTrainOptions& o, BpeTrainStats* stats) {
  Corpus c;
  c.texts = texts;
  return train_corpus(c, o, stats);
}

Tokenizer train_bpe(const std::vector<std::string>& files, const BpeTrainOptions& o, BpeTrainStats* stats) {
  LMCORE_CHECK(!files.empty(), "tokenizer train: no input files");
  std::vector<std::shared_ptr<io::detail::FileBytes>> mapped;
  Corpus c;
  for (const std::string& f : files) {
    mapped.push_back(io::detail::FileBytes::open(f, /*use_mmap=*/true));
    const auto b = mapped.back()->bytes();
    c.texts.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
    c.names.push_back(f);
  }
  return train_corpus(c, o, stats);
}

}  // namespace lmcore::text
