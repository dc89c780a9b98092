// Building a tokenizer from its parts, with every check done before anything is used, and the tables
// encode needs (merge hash table, added-token trie, piece cache, the BPE merge loops).
//
// Checks, in order (errors name the tokenizer and the entry):
//   1. every vocabulary id is < 2^24 and no two strings share an id;
//   2. each of the 256 bytes has a vocabulary token (its one-character byte-level string);
//   3. each merge "a b": a, b and ab are vocabulary strings, the pair is not repeated, and a and b are
//      each a byte token or the result of an earlier merge (ranks in order: GPT-2's merge-all-
//      occurrences rule and the pair-by-pair rule then give the same tokens);
//   4. added tokens: non-empty, distinct contents and ids, ids < 2^24; an added token whose id is also a
//      vocabulary id must stand for the same bytes.
#include "src/text/tokenizer_data.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <queue>

#include "lmcore/core/error.h"
#include "src/text/byte_level.h"
#include "src/text/utf8.h"

namespace lmcore::text::detail {

namespace {

constexpr std::uint32_t kMaxId = (1u << 24) - 1;

std::string printable(std::string_view s, std::size_t max = 40) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", c);
    else out.push_back(static_cast<char>(c));
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace

// ---- MergeTable ----

void MergeTable::build(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& merges,
                       const std::vector<std::uint32_t>& results) {
  std::size_t cap = 16;
  while (cap < merges.size() * 2 + 1) cap *= 2;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const std::uint64_t key = (std::uint64_t{merges[r].first} << 32) | merges[r].second;
    std::uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> shift_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == key) continue;  // the first rank wins (repeats are rejected before this)
    slots_[i] = {key, static_cast<std::uint32_t>(r), results[r]};
  }
}

// ---- AddedMatcher ----

void AddedMatcher::add(std::string_view content, std::uint32_t index) {
  std::uint32_t node = 0;
  for (unsigned char c : content) {
    auto& next = nodes_[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), c,
                               [](const std::pair<unsigned char, std::uint32_t>& e, unsigned char v) { return e.first < v; });
    if (it != next.end() && it->first == c) {
      node = it->second;
    } else {
      const auto child = static_cast<std::uint32_t>(nodes_.size());
      next.insert(it, {c, child});
      nodes_.emplace_back();
      node = child;
    }
  }
  nodes_[node].token = index;
  if (!content.empty()) first_[static_cast<unsigned char>(content[0])] = true;
}

bool AddedMatcher::find(std::string_view text, std::size_t from, Match& m) const {
  if (empty()) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = from; i < text.size(); ++i) {
    if (!first_[p[i]]) continue;
    std::uint32_t node = 0;
    std::int64_t best = -1;
    std::size_t best_end = 0;
    for (std::size_t j = i; j < text.size(); ++j) {
      const auto& next = nodes_[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), p[j],
                                 [](const std::pair<unsigned char, std::uint32_t>& e, unsigned char v) { return e.first < v; });
      if (it == next.end() || it->first != p[j]) break;
      node = it->second;
      if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = j + 1;
    }
    if (best >= 0) {
      m = {i, best_end, static_cast<std::uint32_t>(best)};
      return true;
    }
  }
  return false;
}

// ---- PieceCache ----

PieceCache::PieceCache() : table_(kSlots) {}

std::uint64_t PieceCache::hash(std::string_view s) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  std::uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h | 1;
}

const std::uint32_t* PieceCache::find(std::string_view piece, std::uint64_t hash, std::uint32_t& count) const {
  std::size_t i = hash & (kSlots - 1);
  while (true) {
    const Entry& e = table_[i];
    if (e.hash == 0) return nullptr;
    if (e.hash == hash && e.key_len == piece.size() && std::memcmp(keys_.data() + e.key_off, piece.data(), piece.size()) == 0) {
      count = e.ids_len;
      return ids_.data() + e.ids_off;
    }
    i = (i + 1) & (kSlots - 1);
  }
}

void PieceCache::insert(std::string_view piece, std::uint64_t hash, const std::uint32_t* ids, std::uint32_t count) {
  if (used_ >= kSlots / 2 || keys_.size() > (16u << 20) || ids_.size() > (4u << 20)) {
    std::fill(table_.begin(), table_.end(), Entry{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }
  std::size_t i = hash & (kSlots - 1);
  while (table_[i].hash != 0) i = (i + 1) & (kSlots - 1);
  table_[i] = {hash, static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(piece.size()),
               static_cast<std::uint32_t>(ids_.size()), count};
  keys_.append(piece);
  ids_.insert(ids_.end(), ids, ids + count);
  ++used_;
}

// ---- BPE on one piece ----

namespace {

// Pieces up to this many bytes merge with a rank array and linear scans (no allocation beyond the
// stack); longer ones with a heap over a linked list, O(n log n).
constexpr std::size_t kSmallPiece = 128;

void bpe_small(const TokenizerData& d, std::string_view piece, std::vector<std::uint32_t>& out) {
  std::uint32_t sym[kSmallPiece], rank[kSmallPiece], result[kSmallPiece];
  std::size_t n = piece.size();
  for (std::size_t i = 0; i < n; ++i) sym[i] = d.byte_token[static_cast<unsigned char>(piece[i])];
  for (std::size_t i = 0; i + 1 < n; ++i) {
    const auto h = d.table.find(sym[i], sym[i + 1]);
    rank[i] = h.rank, result[i] = h.result;
  }
  while (n > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoRank) break;
    sym[best] = result[best];
    // Remove symbol best+1 and pair best+1 (the pair (best+1, best+2) becomes (best, best+1)).
    for (std::size_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (std::size_t i = best + 1; i + 2 < n; ++i) rank[i] = rank[i + 1], result[i] = result[i + 1];
    --n;
    if (best > 0) {
      const auto h = d.table.find(sym[best - 1], sym[best]);
      rank[best - 1] = h.rank, result[best - 1] = h.result;
    }
    if (best + 1 < n) {
      const auto h = d.table.find(sym[best], sym[best + 1]);
      rank[best] = h.rank, result[best] = h.result;
    }
  }
  out.insert(out.end(), sym, sym + n);
}

void bpe_large(const TokenizerData& d, std::string_view piece, std::vector<std::uint32_t>& out) {
  const std::size_t n = piece.size();
  constexpr std::uint32_t kNone = 0xFFFFFFFFu;
  std::vector<std::uint32_t> sym(n), next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    sym[i] = d.byte_token[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? static_cast<std::uint32_t>(i + 1) : kNone;
    prev[i] = i > 0 ? static_cast<std::uint32_t>(i - 1) : kNone;
  }
  // Min-heap of (rank, position): the lowest rank first, the leftmost among equal ranks.
  using Entry = std::pair<std::uint32_t, std::uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    const auto h = d.table.find(sym[i], sym[i + 1]);
    if (h.rank != kNoRank) heap.push({h.rank, static_cast<std::uint32_t>(i)});
  }
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    if (dead[i] || next[i] == kNone) continue;
    const std::uint32_t j = next[i];
    const auto h = d.table.find(sym[i], sym[j]);
    if (h.rank != r) continue;  // stale: the pair at i changed since this entry was pushed
    sym[i] = h.result;
    dead[j] = true;
    next[i] = next[j];
    if (next[j] != kNone) prev[next[j]] = i;
    if (prev[i] != kNone) {
      const auto hp = d.table.find(sym[prev[i]], sym[i]);
      if (hp.rank != kNoRank) heap.push({hp.rank, prev[i]});
    }
    if (next[i] != kNone) {
      const auto hn = d.table.find(sym[i], sym[next[i]]);
      if (hn.rank != kNoRank) heap.push({hn.rank, i});
    }
  }
  for (std::uint32_t i = 0; i != kNone; i = next[i]) out.push_back(sym[i]);
}

}  // namespace

void bpe_encode_piece(const TokenizerData& d, std::string_view piece, std::vector<std::uint32_t>& out,
                      PieceCache* cache) {
  const std::size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(d.byte_token[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (d.ignore_merges) {
    const auto it = d.bytes_index.find(std::string(piece));
    if (it != d.bytes_index.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (n > kSmallPiece) {
    bpe_large(d, piece, out);
    return;
  }
  if (n == 2 || cache == nullptr) {
    bpe_small(d, piece, out);
    return;
  }
  const std::uint64_t h = PieceCache::hash(piece);
  std::uint32_t count = 0;
  if (const std::uint32_t* ids = cache->find(piece, h, count)) {
    out.insert(out.end(), ids, ids + count);
    return;
  }
  const std::size_t before = out.size();
  bpe_small(d, piece, out);
  cache->insert(piece, h, out.data() + before, static_cast<std::uint32_t>(out.size() - before));
}

// ---- build ----

void TokenizerData::enable_ignore_merges() {
  ignore_merges = true;
  bytes_index.clear();
  bytes_index.reserve(vocab.size());
  for (const auto& [tok, id] : vocab)
    if (kind[id] == 1) bytes_index.emplace(std::string(token_bytes(id)), id);
}

std::shared_ptr<TokenizerData> TokenizerData::build(const std::vector<std::pair<std::string, std::uint32_t>>& vocab,
                                                    const std::vector<std::pair<std::string, std::string>>& merges,
                                                    std::vector<AddedToken> added, PreTokenizerConfig pre,
                                                    std::string name) {
  static std::atomic<std::uint64_t> next_serial{1};
  auto d = std::make_shared<TokenizerData>();
  d->serial = next_serial++;
  d->name = std::move(name);
  const std::string& nm = d->name;
  // 1. vocabulary ids
  std::uint32_t max_id = 0;
  bool any = false;
  for (const auto& [tok, id] : vocab) {
    LMCORE_CHECK(id <= kMaxId, "{}: vocab: token '{}' has id {}, above the largest supported id {}", nm,
                 printable(tok), id, kMaxId);
    max_id = std::max(max_id, id);
    any = true;
  }
  for (const AddedToken& a : added) {
    LMCORE_CHECK(a.id <= kMaxId, "{}: added token '{}' has id {}, above the largest supported id {}", nm,
                 printable(a.content), a.id, kMaxId);
    max_id = std::max(max_id, a.id);
    any = true;
  }
  LMCORE_CHECK(any, "{}: the vocabulary is empty", nm);
  const std::size_t size = std::size_t{max_id} + 1;
  std::vector<std::string> raw(size);
  d->kind.assign(size, 0);
  std::vector<std::int64_t> vocab_entry(size, -1);
  d->vocab = vocab;
  d->vocab_index.reserve(vocab.size());
  for (std::size_t k = 0; k < vocab.size(); ++k) {
    const auto& [tok, id] = vocab[k];
    if (vocab_entry[id] >= 0)
      fail("{}: vocab: tokens '{}' and '{}' both have id {}", nm, printable(vocab[vocab_entry[id]].first),
           printable(tok), id);
    LMCORE_CHECK(detail::first_invalid_utf8(tok) == std::string_view::npos, "{}: vocab: token with id {} is not UTF-8",
                 nm, id);
    if (!d->vocab_index.emplace(tok, id).second)
      fail("{}: vocab: token '{}' appears twice (ids {} and {})", nm, printable(tok), d->vocab_index.at(tok), id);
    vocab_entry[id] = static_cast<std::int64_t>(k);
    raw[id] = byte_level_to_bytes(tok);
    d->kind[id] = 1;
  }
  // 2. byte tokens
  for (int b = 0; b < 256; ++b) {
    const std::string s = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
    const auto it = d->vocab_index.find(s);
    LMCORE_CHECK(it != d->vocab_index.end(),
                 "{}: vocab has no token for byte 0x{:02X} ('{}'); a byte-level BPE vocabulary holds all 256", nm, b, s);
    d->byte_token[b] = it->second;
  }
  // 3. merges
  std::vector<bool> produced(size, false);
  for (int b = 0; b < 256; ++b) produced[d->byte_token[b]] = true;
  d->merges.reserve(merges.size());
  d->merge_results.reserve(merges.size());
  std::unordered_map<std::uint64_t, std::size_t> seen;
  seen.reserve(merges.size() * 2);
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = d->vocab_index.find(a), ib = d->vocab_index.find(b);
    LMCORE_CHECK(ia != d->vocab_index.end(), "{}: merge {} '{} {}': '{}' is not in the vocabulary", nm, r,
                 printable(a), printable(b), printable(a));
    LMCORE_CHECK(ib != d->vocab_index.end(), "{}: merge {} '{} {}': '{}' is not in the vocabulary", nm, r,
                 printable(a), printable(b), printable(b));
    const auto ic = d->vocab_index.find(a + b);
    LMCORE_CHECK(ic != d->vocab_index.end(), "{}: merge {} '{} {}': the merged token '{}' is not in the vocabulary",
                 nm, r, printable(a), printable(b), printable(a + b));
    const std::uint64_t key = (std::uint64_t{ia->second} << 32) | ib->second;
    if (const auto [it, fresh] = seen.emplace(key, r); !fresh)
      fail("{}: merge {} '{} {}' repeats merge {}", nm, r, printable(a), printable(b), it->second);
    for (const auto* part : {&ia, &ib}) {
      if (!produced[(*part)->second])
        fail("{}: merge {} '{} {}': '{}' is neither a byte nor the result of an earlier merge (ranks out of order)",
             nm, r, printable(a), printable(b), printable((*part)->first));
    }
    produced[ic->second] = true;
    d->merges.emplace_back(ia->second, ib->second);
    d->merge_results.push_back(ic->second);
  }
  d->table.build(d->merges, d->merge_results);
  // 4. added tokens
  std::unordered_map<std::string, std::uint32_t> added_content;
  std::vector<bool> added_id(size, false);
  for (std::size_t k = 0; k < added.size(); ++k) {
    const AddedToken& a = added[k];
    LMCORE_CHECK(!a.content.empty(), "{}: added token with id {} has empty content", nm, a.id);
    LMCORE_CHECK(detail::first_invalid_utf8(a.content) == std::string_view::npos,
                 "{}: added token with id {} is not UTF-8", nm, a.id);
    if (added_id[a.id]) fail("{}: added tokens: id {} is given twice ('{}')", nm, a.id, printable(a.content));
    if (const auto [it, fresh] = added_content.emplace(a.content, a.id); !fresh)
      fail("{}: added tokens: '{}' is given twice (ids {} and {})", nm, printable(a.content), it->second, a.id);
    if (d->kind[a.id] == 1 && raw[a.id] != a.content)
      fail("{}: added token '{}' has id {}, which the vocabulary gives to '{}'", nm, printable(a.content), a.id,
           printable(vocab[vocab_entry[a.id]].first));
    added_id[a.id] = true;
    raw[a.id] = a.content;
    d->kind[a.id] = a.special ? 3 : 2;
    d->match_all.add(a.content, static_cast<std::uint32_t>(k));
    if (!a.special) d->match_plain.add(a.content, static_cast<std::uint32_t>(k));
  }
  d->added = std::move(added);
  // Id -> bytes.
  d->offset.resize(size + 1);
  std::size_t total = 0;
  for (std::size_t i = 0; i < size; ++i) total += raw[i].size();
  d->bytes.reserve(total);
  for (std::size_t i = 0; i < size; ++i) {
    d->offset[i] = d->bytes.size();
    d->bytes += raw[i];
  }
  d->offset[size] = d->bytes.size();
  d->vocab_pos = std::move(vocab_entry);
  d->pre = std::move(pre);
  bool cut = !d->pre.add_prefix_space && (d->pre.splits.empty() ? d->pre.byte_level_use_regex : d->pre.splits[0].cuts_at_lines());
  for (const AddedToken& a : d->added)
    if (a.lstrip || a.rstrip || a.content.find('\n') != std::string::npos) cut = false;
  d->can_cut = cut;
  return d;
}

}  // namespace lmcore::text::detail
