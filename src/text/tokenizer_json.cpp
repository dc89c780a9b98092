// Hugging Face tokenizer.json and GPT-2 vocab.json + merges.txt, read and written.
//
// tokenizer.json (the parts lmcore reads; anything else is an error naming it):
//   {
//     "version": "1.0",
//     "truncation", "padding": ignored (batch settings encode does not apply); written as null
//     "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
//                       "rstrip": false, "normalized": true, "special": true}, ...],
//     "normalizer": null,
//     "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
//                    | {"type": "Sequence", "pretokenizers": [
//                         {"type": "Split", "pattern": {"Regex": "..."} | {"String": "..."},
//                          "behavior": "Isolated", "invert": false}, ...,
//                         {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
//     "post_processor": anything (kept for save(), not applied),
//     "decoder": {"type": "ByteLevel", ...},
//     "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
//               "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
//               "ignore_merges": false,
//               "vocab": {"!": 0, "\"": 1, ...},                     byte-level strings -> ids
//               "merges": ["Ġ t", ...] | [["Ġ", "t"], ...]}         in rank order
//   }
// Checks before use, in order: 1. the file is at most 1 GiB and valid JSON nested at most 64 deep, with
// no key twice in an object; 2. model.type is BPE (other types are named in the error); 3. the model's
// options are the byte-level ones (no dropout, prefix/suffix or byte fallback); 4. normalizer null,
// pre-tokenizer and decoder as above; 5. vocab and merges well-typed; 6. the checks of
// TokenizerData::build (ids, byte tokens, merges in order, added tokens).
#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"
#include "lmcore/text/tokenizer.h"
#include "src/io/file_util.h"
#include "src/text/byte_level.h"
#include "src/text/tokenizer_data.h"
#include "src/text/utf8.h"

namespace lmcore::text {

namespace {

// Reading uses nlohmann::json, whose objects are std::maps: ordered_json's are vectors searched linearly
// on every insertion, quadratic in a 128k-token vocabulary. Small parts are written with ordered_json
// (HF's key order); the vocabulary and merges are written by hand, in id and rank order.
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using detail::TokenizerData;

constexpr std::uint64_t kMaxFileBytes = std::uint64_t{1} << 30;
constexpr int kMaxDepth = 64;

// The whole file, which must be a regular one (a FIFO would block the reader forever) of at most
// kMaxFileBytes.
std::string read_file(const std::string& path, const char* what) { return base::read_file(path, what, kMaxFileBytes); }

// Check 1: JSON, depth-bounded, no repeated keys.
json parse_json(std::string_view text, const std::string& name) {
  LMCORE_CHECK(text.size() <= kMaxFileBytes, "{}: {} bytes of JSON, more than the {} this reader accepts", name,
               text.size(), kMaxFileBytes);
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxDepth) fail("{}: JSON nested deeper than {} levels", name, kMaxDepth);
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.empty() && !keys.back().insert(k).second && duplicate.empty()) duplicate = k;
        break;
      }
      default:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", name, e.what());
  }
  if (!duplicate.empty()) fail("{}: the key '{}' appears twice in one object", name, duplicate);
  return j;
}

std::string type_of(const json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
  return j.is_null() ? "null" : j.dump().substr(0, 80);
}

bool get_bool(const json& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  LMCORE_CHECK(obj[key].is_boolean(), "{}: '{}' must be true or false, found {}", where, key, obj[key].dump());
  return obj[key].get<bool>();
}

const std::string& get_string(const json& obj, const char* key, const std::string& where) {
  LMCORE_CHECK(obj.is_object() && obj.contains(key), "{}: '{}' is missing", where, key);
  LMCORE_CHECK(obj[key].is_string(), "{}: '{}' must be a string, found {}", where, key, obj[key].dump().substr(0, 80));
  return obj[key].get_ref<const std::string&>();
}

std::uint32_t get_id(const json& v, const std::string& where) {
  LMCORE_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= 0x7FFFFFFF,
               "{}: id must be an integer in [0, 2^31), found {}", where, v.dump().substr(0, 80));
  return static_cast<std::uint32_t>(v.get<std::int64_t>());
}

// ByteLevel step of a pre-tokenizer: (add_prefix_space, use_regex).
void read_byte_level(const json& j, const std::string& where, PreTokenizerConfig& pre) {
  pre.add_prefix_space = get_bool(j, "add_prefix_space", true, where);
  pre.byte_level_use_regex = get_bool(j, "use_regex", true, where);
}

std::string literal_pattern(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Check 4 (pre-tokenizer).
PreTokenizerConfig read_pre_tokenizer(const json& j, const std::string& name) {
  const std::string where = name + ": pre_tokenizer";
  PreTokenizerConfig pre;
  const std::string type = type_of(j);
  if (type == "ByteLevel") {
    read_byte_level(j, where, pre);
    return pre;
  }
  LMCORE_CHECK(type == "Sequence",
               "{} '{}' is not supported; expected ByteLevel, or a Sequence of Split steps and a ByteLevel step", where,
               type);
  LMCORE_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), "{}: Sequence without a 'pretokenizers' list",
               where);
  const json& steps = j["pretokenizers"];
  bool byte_level = false;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string w = fmt::format("{}.pretokenizers[{}]", where, i);
    const std::string t = type_of(steps[i]);
    LMCORE_CHECK(!byte_level, "{}: '{}' after the ByteLevel step is not supported (ByteLevel must be last)", w, t);
    if (t == "ByteLevel") {
      read_byte_level(steps[i], w, pre);
      byte_level = true;
      continue;
    }
    LMCORE_CHECK(t == "Split", "{}: pre-tokenizer '{}' is not supported; expected Split or ByteLevel", w, t);
    const std::string behavior = get_string(steps[i], "behavior", w);
    LMCORE_CHECK(behavior == "Isolated", "{}: Split behavior '{}' is not supported; expected Isolated", w, behavior);
    LMCORE_CHECK(!get_bool(steps[i], "invert", false, w), "{}: Split with invert: true is not supported", w);
    LMCORE_CHECK(steps[i].contains("pattern") && steps[i]["pattern"].is_object(), "{}: 'pattern' must be an object", w);
    const json& p = steps[i]["pattern"];
    if (p.contains("Regex")) {
      pre.splits.emplace_back(get_string(p, "Regex", w + ".pattern"));
    } else {
      pre.splits.emplace_back(literal_pattern(get_string(p, "String", w + ".pattern")));
    }
  }
  LMCORE_CHECK(byte_level, "{}: the Sequence has no ByteLevel step; only byte-level BPE is supported", where);
  return pre;
}

std::pair<std::string, std::string> read_merge(const json& m, std::size_t r, const std::string& name) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const std::size_t sp = s.find(' ');
    LMCORE_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
                 "{}: merge {} '{}' is not two tokens separated by one space", name, r, s.substr(0, 80));
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  LMCORE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
               "{}: merge {} must be \"a b\" or [\"a\", \"b\"], found {}", name, r, m.dump().substr(0, 80));
  return {m[0].get<std::string>(), m[1].get<std::string>()};
}

Tokenizer parse_tokenizer_json(std::string_view text, const std::string& name) {
  const json j = parse_json(text, name);
  LMCORE_CHECK(j.is_object(), "{}: expected a JSON object at the top, found {}", name, j.type_name());
  // Check 2: the model type.
  LMCORE_CHECK(j.contains("model") && j["model"].is_object(), "{}: no 'model' object", name);
  const json& model = j["model"];
  std::string type;
  if (model.contains("type")) {
    type = get_string(model, "type", name + ": model");
  } else {
    LMCORE_CHECK(model.contains("merges"), "{}: model has no 'type' (and no 'merges', so it is not BPE)", name);
    type = "BPE";
  }
  LMCORE_CHECK(type == "BPE",
               "{}: model type '{}' is not supported; lmcore reads byte-level BPE tokenizers (model type BPE)", name,
               type);
  // Check 3: model options.
  const std::string mw = name + ": model";
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    LMCORE_CHECK(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0,
                 "{}: dropout {} is not supported (BPE dropout is for training a model, not for encoding data)", mw,
                 model["dropout"].dump());
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && !model[k].is_null())
      LMCORE_CHECK(model[k].is_string() && model[k].get_ref<const std::string&>().empty(),
                   "{}: '{}' {} is not supported by byte-level BPE", mw, k, model[k].dump());
  }
  LMCORE_CHECK(!get_bool(model, "byte_fallback", false, mw),
               "{}: byte_fallback: true is SentencePiece-style BPE, not byte-level BPE; not supported", mw);
  const bool ignore_merges = get_bool(model, "ignore_merges", false, mw);
  const bool fuse_unk = get_bool(model, "fuse_unk", false, mw);
  // Check 4: normalizer, pre-tokenizer, decoder.
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    fail("{}: normalizer '{}' is not supported (byte-level BPE tokenizers have none)", name, type_of(j["normalizer"]));
  LMCORE_CHECK(j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null(),
               "{}: no pre_tokenizer; byte-level BPE needs a ByteLevel pre-tokenizer", name);
  PreTokenizerConfig pre = read_pre_tokenizer(j["pre_tokenizer"], name);
  LMCORE_CHECK(j.contains("decoder") && type_of(j["decoder"]) == "ByteLevel",
               "{}: decoder '{}' is not supported; expected ByteLevel", name,
               j.contains("decoder") ? type_of(j["decoder"]) : std::string("(missing)"));
  // Check 5: vocab, merges, added tokens.
  LMCORE_CHECK(model.contains("vocab") && model["vocab"].is_object(), "{}: model has no 'vocab' object", name);
  LMCORE_CHECK(model.contains("merges"), "{}: model has no 'merges'", name);
  LMCORE_CHECK(model["merges"].is_array(), "{}: model 'merges' must be a list", name);
  std::vector<std::pair<std::string, std::uint32_t>> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [tok, id] : model["vocab"].items()) vocab.emplace_back(tok, get_id(id, fmt::format("{}: vocab '{}'", name, tok.substr(0, 80))));
  std::stable_sort(vocab.begin(), vocab.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(model["merges"].size());
  for (std::size_t r = 0; r < model["merges"].size(); ++r) merges.push_back(read_merge(model["merges"][r], r, name));
  std::vector<AddedToken> added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    LMCORE_CHECK(j["added_tokens"].is_array(), "{}: 'added_tokens' must be a list", name);
    for (std::size_t i = 0; i < j["added_tokens"].size(); ++i) {
      const json& a = j["added_tokens"][i];
      const std::string w = fmt::format("{}: added_tokens[{}]", name, i);
      LMCORE_CHECK(a.is_object() && a.contains("id"), "{}: expected an object with 'id' and 'content'", w);
      AddedToken t;
      t.id = get_id(a["id"], w);
      t.content = get_string(a, "content", w);
      t.special = get_bool(a, "special", false, w);
      t.lstrip = get_bool(a, "lstrip", false, w);
      t.rstrip = get_bool(a, "rstrip", false, w);
      t.normalized = get_bool(a, "normalized", !t.special, w);
      LMCORE_CHECK(!get_bool(a, "single_word", false, w), "{} '{}': single_word: true is not supported", w,
                   t.content.substr(0, 80));
      added.push_back(std::move(t));
    }
  }
  // Check 6.
  auto d = TokenizerData::build(vocab, merges, std::move(added), std::move(pre), name);
  if (ignore_merges) d->enable_ignore_merges();
  d->fuse_unk = fuse_unk;
  if (model.contains("unk_token")) d->unk_token_json = model["unk_token"].dump();
  if (j.contains("post_processor")) d->post_processor_json = j["post_processor"].dump();
  return TokenizerData::wrap(std::move(d));
}

ojson byte_level_json(bool add_prefix_space, bool use_regex) {
  ojson b;
  b["type"] = "ByteLevel";
  b["add_prefix_space"] = add_prefix_space;
  b["trim_offsets"] = true;
  b["use_regex"] = use_regex;
  return b;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view json, const std::string& name) { return parse_tokenizer_json(json, name); }

Tokenizer Tokenizer::from_file(const std::string& path) {
  return parse_tokenizer_json(read_file(path, "tokenizer.json"), path);
}

std::string Tokenizer::to_json() const {
  const TokenizerData& d = *d_;
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  ojson added = ojson::array();
  for (const AddedToken& a : d.added) {
    ojson t;
    t["id"] = a.id;
    t["content"] = a.content;
    t["single_word"] = false;
    t["lstrip"] = a.lstrip;
    t["rstrip"] = a.rstrip;
    t["normalized"] = a.normalized;
    t["special"] = a.special;
    added.push_back(std::move(t));
  }
  j["added_tokens"] = std::move(added);
  j["normalizer"] = nullptr;
  const PreTokenizerConfig& pre = d.pre;
  if (pre.splits.empty()) {
    j["pre_tokenizer"] = byte_level_json(pre.add_prefix_space, pre.byte_level_use_regex);
  } else {
    ojson steps = ojson::array();
    for (const SplitPattern& p : pre.splits) {
      ojson s;
      s["type"] = "Split";
      s["pattern"]["Regex"] = p.pattern();
      s["behavior"] = "Isolated";
      s["invert"] = false;
      steps.push_back(std::move(s));
    }
    steps.push_back(byte_level_json(pre.add_prefix_space, pre.byte_level_use_regex));
    j["pre_tokenizer"]["type"] = "Sequence";
    j["pre_tokenizer"]["pretokenizers"] = std::move(steps);
  }
  j["post_processor"] = ojson::parse(d.post_processor_json);
  j["decoder"] = byte_level_json(true, true);
  // The model, by hand: {"type": ..., "vocab": {...}, "merges": [...]} at HF's indentation.
  auto quoted = [](std::string_view t) { return json(t).dump(); };
  std::string m = ",\n  \"model\": {\n";
  m += "    \"type\": \"BPE\",\n    \"dropout\": null,\n";
  m += "    \"unk_token\": " + json::parse(d.unk_token_json).dump() + ",\n";
  m += "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  m += fmt::format("    \"fuse_unk\": {},\n    \"byte_fallback\": false,\n    \"ignore_merges\": {},\n",
                   d.fuse_unk, d.ignore_merges);
  m += "    \"vocab\": {";
  for (std::size_t i = 0; i < d.vocab.size(); ++i)
    m += (i ? ",\n      " : "\n      ") + quoted(d.vocab[i].first) + ": " + std::to_string(d.vocab[i].second);
  m += d.vocab.empty() ? "},\n" : "\n    },\n";
  std::vector<const std::string*> names(d.kind.size(), nullptr);
  for (const auto& [tok, id] : d.vocab) names[id] = &tok;
  bool spaces = false;  // a token with a space cannot be written as "a b"
  for (const auto& [a, b] : d.merges)
    if (names[a]->find(' ') != std::string::npos || names[b]->find(' ') != std::string::npos) spaces = true;
  m += "    \"merges\": [";
  for (std::size_t r = 0; r < d.merges.size(); ++r) {
    const auto& [a, b] = d.merges[r];
    m += r ? ",\n      " : "\n      ";
    m += spaces ? "[" + quoted(*names[a]) + ", " + quoted(*names[b]) + "]" : quoted(*names[a] + " " + *names[b]);
  }
  m += d.merges.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";
  std::string out = j.dump(2);
  out.pop_back();  // the closing brace: the model follows
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out + m;
}

void Tokenizer::save(const std::string& path) const {
  const std::string s = to_json();
  io::detail::AtomicFile out(path);
  out.write(s);
  out.commit();
}

Tokenizer Tokenizer::from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt) {
  const json j = parse_json(read_file(vocab_json, "vocab.json"), vocab_json);
  LMCORE_CHECK(j.is_object(), "{}: expected a JSON object of token -> id, found {}", vocab_json, j.type_name());
  std::vector<std::pair<std::string, std::uint32_t>> vocab;
  vocab.reserve(j.size());
  for (const auto& [tok, id] : j.items()) vocab.emplace_back(tok, get_id(id, fmt::format("{}: '{}'", vocab_json, tok.substr(0, 80))));
  std::stable_sort(vocab.begin(), vocab.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  const std::string text = read_file(merges_txt, "merges.txt");
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream in(text);
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t sp = line.find(' ');
    LMCORE_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
                 "{}: line {} '{}' is not two tokens separated by one space", merges_txt, line_no, line.substr(0, 80));
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  // Vocabulary entries that no merge produces and that are not bytes are special tokens (<|endoftext|>).
  std::set<std::string> produced;
  for (int b = 0; b < 256; ++b) produced.insert(detail::bytes_to_byte_level(std::string(1, static_cast<char>(b))));
  for (const auto& [a, b] : merges) produced.insert(a + b);
  std::vector<AddedToken> added;
  for (const auto& [tok, id] : vocab) {
    if (produced.count(tok)) continue;
    std::string content = detail::byte_level_to_bytes(tok);
    if (detail::first_invalid_utf8(content) != std::string_view::npos) continue;
    AddedToken a;
    a.id = id;
    a.content = std::move(content);
    a.special = true;
    added.push_back(std::move(a));
  }
  return TokenizerData::wrap(
      TokenizerData::build(vocab, merges, std::move(added), PreTokenizerConfig::gpt2(), merges_txt));
}

void Tokenizer::save_gpt2(const std::string& vocab_json, const std::string& merges_txt) const {
  const TokenizerData& d = *d_;
  std::string v = "{";
  std::set<std::string> written;
  auto entry = [&](const std::string& tok, std::uint32_t id) {
    if (!written.insert(tok).second) return;
    v += (v.size() > 1 ? ", " : "") + json(tok).dump() + ": " + std::to_string(id);
  };
  for (const auto& [tok, id] : d.vocab) entry(tok, id);
  for (const AddedToken& a : d.added) entry(a.content, a.id);
  v += "}\n";
  {
    io::detail::AtomicFile out(vocab_json);
    out.write(v);
    out.commit();
  }
  std::vector<const std::string*> names(d.kind.size(), nullptr);
  for (const auto& [tok, id] : d.vocab) names[id] = &tok;
  std::string m = "#version: 0.2\n";
  for (const auto& [a, b] : d.merges) {
    LMCORE_CHECK(names[a]->find(' ') == std::string::npos && names[b]->find(' ') == std::string::npos,
                 "{}: merge '{}' + '{}' holds a space, which merges.txt cannot write", merges_txt, *names[a], *names[b]);
    m += *names[a] + " " + *names[b] + "\n";
  }
  io::detail::AtomicFile out(merges_txt);
  out.write(m);
  out.commit();
}

}  // namespace lmcore::text
