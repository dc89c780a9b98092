// Tokenizer::encode / encode_batch / decode. The pipeline for one text:
//   1. added tokens: the leftmost-longest match of an enabled added token cuts the text (lstrip/rstrip
//      widen the match over white space); each match is its id;
//   2. each stretch between matches goes through the pre-tokenizer (regex splits, ByteLevel prefix
//      space) into pieces;
//   3. each piece is merged by BPE (tokenizer_data.cpp), through a per-thread cache of frequent pieces.
// Long texts are first cut at line starts where the split is unchanged and the parts run in parallel.
#include <algorithm>
#include <atomic>

#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "src/text/tokenizer_data.h"
#include "src/text/utf8.h"

namespace lmcore::text {

namespace detail {
namespace {

// The piece cache of this thread, for the tokenizer with serial `serial`.
PieceCache& thread_cache(std::uint64_t serial) {
  thread_local std::unique_ptr<PieceCache> cache;
  thread_local std::uint64_t owner = 0;
  if (!cache || owner != serial) {
    cache = std::make_unique<PieceCache>();
    owner = serial;
  }
  return *cache;
}

// Unicode White_Space (what Rust's char::is_whitespace tests, as Hugging Face's lstrip/rstrip do).
bool is_white_space(std::uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Length of the white-space character ending at text[end) (0 if none), not reaching before `floor`.
std::size_t space_before(std::string_view text, std::size_t end, std::size_t floor) {
  if (end <= floor) return 0;
  std::size_t b = end - 1;
  while (b > floor && end - b < 4 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + b;
  const int len = utf8_sequence_length(p, end - b);
  if (len == 0 || b + static_cast<std::size_t>(len) != end) return 0;
  return is_white_space(decode_utf8(p, len)) ? end - b : 0;
}

std::size_t space_after(std::string_view text, std::size_t begin) {
  if (begin >= text.size()) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + begin;
  const int len = utf8_sequence_length(p, text.size() - begin);
  if (len == 0) return 0;
  return is_white_space(decode_utf8(p, len)) ? static_cast<std::size_t>(len) : 0;
}

struct Scratch {
  std::vector<Span> spans;
};

void split_pieces(const SplitPattern& p, const std::vector<std::string>& in, std::vector<std::string>& out,
                  std::vector<Span>& spans) {
  out.clear();
  for (const std::string& s : in) {
    spans.clear();
    p.split(s, spans);
    for (const Span& sp : spans) out.emplace_back(s.substr(sp.begin, sp.size()));
  }
}

// Steps 2 and 3 for one stretch of text without added tokens.
void encode_plain(const TokenizerData& d, std::string_view seg, std::vector<std::uint32_t>& out, PieceCache& cache,
                  Scratch& scratch) {
  if (seg.empty()) return;
  const PreTokenizerConfig& pre = d.pre;
  const std::size_t regexes = pre.splits.size() + (pre.byte_level_use_regex ? 1 : 0);
  if (!pre.add_prefix_space && regexes <= 1) {
    if (regexes == 0) {
      bpe_encode_piece(d, seg, out, &cache);
      return;
    }
    const SplitPattern p = pre.splits.empty() ? SplitPattern::gpt2() : pre.splits[0];
    scratch.spans.clear();
    p.split(seg, scratch.spans);
    for (const Span& s : scratch.spans) bpe_encode_piece(d, seg.substr(s.begin, s.size()), out, &cache);
    return;
  }
  // The general pipeline, with the pieces as strings (a prefix space changes them).
  std::vector<std::string> pieces{std::string(seg)}, next;
  for (const SplitPattern& p : pre.splits) {
    split_pieces(p, pieces, next, scratch.spans);
    pieces.swap(next);
  }
  if (pre.add_prefix_space)
    for (std::string& s : pieces)
      if (!s.empty() && s[0] != ' ') s.insert(s.begin(), ' ');
  if (pre.byte_level_use_regex) {
    split_pieces(SplitPattern::gpt2(), pieces, next, scratch.spans);
    pieces.swap(next);
  }
  for (const std::string& s : pieces) bpe_encode_piece(d, s, out, &cache);
}

// Steps 1-3 for one text (or one part of a long text).
void encode_text(const TokenizerData& d, std::string_view text, bool allow_special, std::vector<std::uint32_t>& out) {
  PieceCache& cache = thread_cache(d.serial);
  Scratch scratch;
  const AddedMatcher& m = allow_special ? d.match_all : d.match_plain;
  std::size_t pos = 0;
  AddedMatcher::Match hit;
  while (pos < text.size()) {
    if (!m.find(text, pos, hit)) break;
    const AddedToken& a = d.added[hit.index];
    std::size_t begin = hit.begin, end = hit.end;
    if (a.lstrip)
      while (const std::size_t k = space_before(text, begin, pos)) begin -= k;
    if (a.rstrip)
      while (const std::size_t k = space_after(text, end)) end += k;
    encode_plain(d, text.substr(pos, begin - pos), out, cache, scratch);
    out.push_back(a.id);
    pos = end;
  }
  encode_plain(d, text.substr(pos), out, cache, scratch);
}

// Parts of one text: [begin, end) byte ranges.
std::vector<Span> parts_of(const TokenizerData& d, std::string_view text, const EncodeOptions& o) {
  if (!d.can_cut || o.chunk_bytes == 0 || text.size() <= o.chunk_bytes) return {{0, text.size()}};
  std::vector<Span> parts;
  std::size_t b = 0;
  for (std::size_t c : line_cuts(text, o.chunk_bytes)) {
    parts.push_back({b, c});
    b = c;
  }
  parts.push_back({b, text.size()});
  return parts;
}

// Runs fn(item) for items [0, n) on lmcore's threads, each thread taking the next item when done.
template <typename Fn>
void for_each_item(std::size_t n, Fn&& fn) {
  if (n == 0) return;
  if (n == 1 || num_threads() == 1 || in_parallel_region()) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  parallel_for(0, std::min<std::int64_t>(num_threads(), static_cast<std::int64_t>(n)), 1,
               [&](std::int64_t lo, std::int64_t hi) {
                 for (std::int64_t w = lo; w < hi; ++w)
                   for (std::size_t i = next++; i < n; i = next++) fn(i);
               });
}

}  // namespace
}  // namespace detail

using detail::TokenizerData;

void Tokenizer::encode_into(std::string_view text, std::vector<std::uint32_t>& out, const EncodeOptions& o) const {
  const TokenizerData& d = *d_;
  const std::vector<Span> parts = detail::parts_of(d, text, o);
  if (parts.size() == 1) {
    detail::encode_text(d, text, o.allow_special, out);
    return;
  }
  std::vector<std::vector<std::uint32_t>> ids(parts.size());
  detail::for_each_item(parts.size(), [&](std::size_t i) {
    ids[i].reserve(parts[i].size() / 3);
    detail::encode_text(d, text.substr(parts[i].begin, parts[i].size()), o.allow_special, ids[i]);
  });
  std::size_t total = out.size();
  for (const auto& v : ids) total += v.size();
  out.reserve(total);
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& o) const {
  std::vector<std::uint32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out, o);
  return out;
}

std::vector<std::vector<std::uint32_t>> Tokenizer::encode_batch(std::span<const std::string_view> texts,
                                                                const EncodeOptions& o) const {
  const TokenizerData& d = *d_;
  struct Item {
    std::size_t text;
    Span part;
  };
  std::vector<Item> items;
  std::vector<std::size_t> first(texts.size() + 1);  // items of text t: [first[t], first[t+1])
  for (std::size_t t = 0; t < texts.size(); ++t) {
    first[t] = items.size();
    for (const Span& p : detail::parts_of(d, texts[t], o)) items.push_back({t, p});
  }
  first[texts.size()] = items.size();
  std::vector<std::vector<std::uint32_t>> ids(items.size());
  detail::for_each_item(items.size(), [&](std::size_t i) {
    const Item& it = items[i];
    ids[i].reserve(it.part.size() / 3 + 4);
    detail::encode_text(d, texts[it.text].substr(it.part.begin, it.part.size()), o.allow_special, ids[i]);
  });
  std::vector<std::vector<std::uint32_t>> out(texts.size());
  for (std::size_t t = 0; t < texts.size(); ++t) {
    if (first[t + 1] - first[t] == 1) {
      out[t] = std::move(ids[first[t]]);
      continue;
    }
    for (std::size_t i = first[t]; i < first[t + 1]; ++i) out[t].insert(out[t].end(), ids[i].begin(), ids[i].end());
  }
  return out;
}

std::vector<std::vector<std::uint32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                                const EncodeOptions& o) const {
  std::vector<std::string_view> views(texts.begin(), texts.end());
  return encode_batch(std::span<const std::string_view>(views), o);
}

std::vector<std::size_t> Tokenizer::cut_points(std::string_view text, std::size_t target) const {
  if (!d_->can_cut) return {};
  return line_cuts(text, target);
}

std::string Tokenizer::decode_bytes(std::span<const std::uint32_t> ids, bool skip_special) const {
  const TokenizerData& d = *d_;
  std::size_t total = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint32_t id = ids[i];
    if (id >= d.kind.size() || d.kind[id] == 0)
      fail("{}: decode: id {} at position {} is not in the vocabulary (size {})", d.name, id, i, d.vocab_size());
    total += d.offset[id + 1] - d.offset[id];
  }
  std::string out;
  out.reserve(total);
  for (const std::uint32_t id : ids) {
    if (skip_special && d.kind[id] == 3) continue;
    out.append(d.bytes, d.offset[id], d.offset[id + 1] - d.offset[id]);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const std::uint32_t> ids, bool skip_special) const {
  const std::string raw = decode_bytes(ids, skip_special);
  if (detail::first_invalid_utf8(raw) == std::string_view::npos) return raw;
  std::string out;
  out.reserve(raw.size() + 16);
  detail::append_utf8_lossy(out, raw);
  return out;
}

std::string_view Tokenizer::token_bytes(std::uint32_t id) const { return d_->token_bytes(id); }

std::int64_t Tokenizer::vocab_size() const { return d_->vocab_size(); }

std::optional<std::uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : d_->added)
    if (a.content == token) return a.id;
  const auto it = d_->vocab_index.find(std::string(token));
  if (it == d_->vocab_index.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::id_to_token(std::uint32_t id) const {
  const TokenizerData& d = *d_;
  LMCORE_CHECK(id < d.kind.size() && d.kind[id] != 0, "{}: id {} is not in the vocabulary (size {})", d.name, id,
               d.vocab_size());
  if (d.kind[id] >= 2) return std::string(d.token_bytes(id));  // an added token: its content
  return d.vocab[static_cast<std::size_t>(d.vocab_pos[id])].first;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return d_->added; }

std::optional<std::uint32_t> Tokenizer::special_token_id(std::string_view content) const {
  for (const AddedToken& a : d_->added)
    if (a.special && a.content == content) return a.id;
  return std::nullopt;
}

std::optional<std::uint32_t> Tokenizer::end_of_text_id() const {
  for (const char* c : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
    if (auto id = special_token_id(c)) return id;
  return std::nullopt;
}

const std::vector<std::pair<std::uint32_t, std::uint32_t>>& Tokenizer::merges() const { return d_->merges; }

std::uint32_t Tokenizer::merge_result(std::size_t rank) const {
  LMCORE_CHECK(rank < d_->merge_results.size(), "merge_result: rank {} is out of range (the tokenizer has {} merges)",
               rank, d_->merge_results.size());
  return d_->merge_results[rank];
}

const PreTokenizerConfig& Tokenizer::pre_tokenizer() const { return d_->pre; }

PreTokenizerConfig PreTokenizerConfig::gpt2() {
  PreTokenizerConfig c;
  c.byte_level_use_regex = true;
  return c;
}

PreTokenizerConfig PreTokenizerConfig::llama3() {
  PreTokenizerConfig c;
  c.splits.push_back(SplitPattern::llama3());
  return c;
}

PreTokenizerConfig PreTokenizerConfig::from_name(std::string_view name) {
  if (name == "gpt2") return gpt2();
  if (name == "llama3") return llama3();
  fail("pre-tokenizer '{}' is not known; expected gpt2 or llama3", name);
}

Tokenizer Tokenizer::from_parts(const std::vector<std::pair<std::string, std::uint32_t>>& vocab,
                                const std::vector<std::pair<std::string, std::string>>& merges,
                                std::vector<AddedToken> added, PreTokenizerConfig pre, const std::string& name) {
  return Tokenizer(TokenizerData::build(vocab, merges, std::move(added), std::move(pre), name));
}

}  // namespace lmcore::text
