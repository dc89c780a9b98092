// Reads the code cells of a Jupyter notebook for upgrade-check; see include/lmcore/upgrade/notebook.h.
#include "lmcore/upgrade/notebook.h"

#include <nlohmann/json.hpp>

#include "lmcore/base/error.h"

namespace lmcore::upgrade {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Blanks IPython-only lines of one cell in place; collects shell lines.
void blank_magics(std::string& src, int cell, std::vector<NotebookShellLine>& shell) {
  std::size_t pos = 0;
  int line = 1;
  bool whole_cell = false;
  {
    std::size_t k = src.find_first_not_of(" \t\r\n");
    if (k != std::string::npos && starts_with(std::string_view(src).substr(k), "%%")) {
      const std::string_view magic = std::string_view(src).substr(k + 2);
      whole_cell = !(starts_with(magic, "time") || starts_with(magic, "capture") || starts_with(magic, "prun"));
    }
  }
  while (pos < src.size()) {
    std::size_t eol = src.find('\n', pos);
    if (eol == std::string::npos) eol = src.size();
    std::size_t first = src.find_first_not_of(" \t", pos);
    if (first > eol) first = eol;
    std::size_t last = eol;
    while (last > first && (src[last - 1] == '\r' || src[last - 1] == ' ' || src[last - 1] == '\t')) --last;
    const bool magic = first < eol && (src[first] == '%' || src[first] == '!');
    const bool help = last > first && src[last - 1] == '?' && src[first] != '#';
    if (whole_cell || magic || help) {
      if (first < eol && (src[first] == '!' || starts_with(std::string_view(src).substr(first), "%pip") ||
                          starts_with(std::string_view(src).substr(first), "%conda")))
        shell.push_back({cell, line, static_cast<int>(first - pos), src.substr(first + 1, last - first - 1)});
      for (std::size_t i = pos; i < eol; ++i)
        if (src[i] != '\r') src[i] = ' ';
    }
    pos = eol + 1;
    ++line;
  }
}

// ---- byte positions of cell sources in the raw JSON text ----------------------------------------
// A small JSON scanner that follows only {"cells": [{"source": "..." | ["...", ...]}, ...]} and
// records, for every decoded byte of each source, the offset of the raw byte (or escape) it came from.
class RawLocator {
 public:
  explicit RawLocator(std::string_view s) : s_(s) {}

  // Per cell (all cells, in order): decoded source and raw offsets (one per byte, plus the end).
  bool run(std::vector<std::pair<std::string, std::vector<std::uint32_t>>>& cells) {
    ws();
    return object([&](const std::string& key) { return key == "cells" ? cell_list(cells) : skip(); });
  }

 private:
  bool cell_list(std::vector<std::pair<std::string, std::vector<std::uint32_t>>>& cells) {
    return array([&] {
      cells.emplace_back();
      std::string& text = cells.back().first;
      std::vector<std::uint32_t>& raw = cells.back().second;
      const bool ok = peek() != '{' ? skip() : object([&](const std::string& key) {
        if (key == "source" && peek() == '"') return string(&text, &raw);
        if (key == "source" && peek() == '[') return array([&] { return string(&text, &raw); });
        return skip();
      });
      raw.push_back(static_cast<std::uint32_t>(p_));  // one past the end
      return ok;
    });
  }

  // The object at p_: `member(key)` reads each member's value (starting at the value).
  template <typename Member>
  bool object(Member&& member) {
    if (!eat('{')) return false;
    ws();
    if (eat('}')) return true;
    std::string key;
    while (true) {
      key.clear();
      if (!string(&key, nullptr)) return false;
      ws();
      if (!eat(':')) return false;
      ws();
      if (!member(key)) return false;
      ws();
      if (eat('}')) return true;
      if (!eat(',')) return false;
      ws();
    }
  }

  // The array at p_: `element()` reads each element (starting at the element).
  template <typename Element>
  bool array(Element&& element) {
    if (!eat('[')) return false;
    ws();
    if (eat(']')) return true;
    while (true) {
      if (!element()) return false;
      ws();
      if (eat(']')) return true;
      if (!eat(',')) return false;
      ws();
    }
  }

  // Decodes a JSON string at p_, appending bytes to *out and their raw offsets to *raw.
  bool string(std::string* out, std::vector<std::uint32_t>* raw) {
    if (!eat('"')) return false;
    while (p_ < s_.size()) {
      const std::size_t at = p_;
      const char c = s_[p_++];
      if (c == '"') return true;
      if (c != '\\') {
        put(out, raw, c, at);
        continue;
      }
      if (p_ >= s_.size()) return false;
      const char e = s_[p_++];
      switch (e) {
        case '"': case '\\': case '/': put(out, raw, e, at); break;
        case 'b': put(out, raw, '\b', at); break;
        case 'f': put(out, raw, '\f', at); break;
        case 'n': put(out, raw, '\n', at); break;
        case 'r': put(out, raw, '\r', at); break;
        case 't': put(out, raw, '\t', at); break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF && p_ + 1 < s_.size() && s_[p_] == '\\' && s_[p_ + 1] == 'u') {
            p_ += 2;
            std::uint32_t lo = 0;
            if (!hex4(lo)) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          char buf[4];
          int n = 0;
          if (cp < 0x80) buf[n++] = static_cast<char>(cp);
          else if (cp < 0x800) buf[n++] = static_cast<char>(0xC0 | (cp >> 6)), buf[n++] = static_cast<char>(0x80 | (cp & 0x3F));
          else if (cp < 0x10000) buf[n++] = static_cast<char>(0xE0 | (cp >> 12)), buf[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                                 buf[n++] = static_cast<char>(0x80 | (cp & 0x3F));
          else buf[n++] = static_cast<char>(0xF0 | (cp >> 18)), buf[n++] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
               buf[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), buf[n++] = static_cast<char>(0x80 | (cp & 0x3F));
          for (int k = 0; k < n; ++k) put(out, raw, buf[k], at);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  bool hex4(std::uint32_t& v) {
    if (p_ + 4 > s_.size()) return false;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[p_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<std::uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<std::uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<std::uint32_t>(h - 'A' + 10);
      else return false;
    }
    return true;
  }

  static void put(std::string* out, std::vector<std::uint32_t>* raw, char c, std::size_t at) {
    if (out) out->push_back(c);
    if (raw) raw->push_back(static_cast<std::uint32_t>(at));
  }

  // Skips any JSON value.
  bool skip() {
    ws();
    const char c = peek();
    if (c == '"') return string(nullptr, nullptr);
    if (c == '{') return object([&](const std::string&) { return skip(); });
    if (c == '[') return array([&] { return skip(); });
    // number, true, false, null
    const std::size_t b = p_;
    while (p_ < s_.size() && std::string_view(",}] \t\r\n").find(s_[p_]) == std::string_view::npos) ++p_;
    return p_ > b;
  }

  void ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\r' || s_[p_] == '\n')) ++p_;
  }
  bool eat(char c) {
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  char peek() const { return p_ < s_.size() ? s_[p_] : '\0'; }

  std::string_view s_;
  std::size_t p_ = 0;
};

std::string cell_source(const nlohmann::json& s) {
  if (s.is_string()) return s.get<std::string>();
  std::string out;
  if (s.is_array())
    for (const auto& part : s)
      if (part.is_string()) out += part.get<std::string>();
  return out;
}

}  // namespace

Notebook read_notebook(std::string_view json_text) {
  nlohmann::json nb;
  try {
    nb = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    fail("not valid JSON: {}", e.what());
  }
  const nlohmann::json* cells = nullptr;
  if (nb.is_object() && nb.contains("cells") && nb["cells"].is_array()) {
    cells = &nb["cells"];
  } else if (nb.is_object() && nb.contains("worksheets") && nb["worksheets"].is_array() && !nb["worksheets"].empty() &&
             nb["worksheets"][0].contains("cells")) {
    cells = &nb["worksheets"][0]["cells"];  // nbformat 3
  }
  LMCORE_CHECK(cells && cells->is_array(), "expected a JSON object with a 'cells' list (nbformat 4)");
  std::vector<std::pair<std::string, std::vector<std::uint32_t>>> located;
  if (!RawLocator(json_text).run(located) || located.size() != cells->size()) located.clear();
  Notebook out;
  int number = 0;
  for (const auto& c : *cells) {
    ++number;
    if (!c.is_object() || c.value("cell_type", "") != "code") continue;
    std::string src = cell_source(c.contains("source") ? c["source"] : c.value("input", nlohmann::json()));
    std::vector<std::uint32_t> raw;
    const std::size_t k = static_cast<std::size_t>(number - 1);
    if (k < located.size() && located[k].first == src && located[k].second.size() == src.size() + 1)
      raw = std::move(located[k].second);
    blank_magics(src, number, out.shell_lines);
    out.code.push_back(std::move(src));
    out.cell_number.push_back(number);
    out.raw_offset.push_back(std::move(raw));
  }
  return out;
}

bool notebook_raw_range(const Notebook& nb, std::size_t index, std::uint32_t& begin, std::uint32_t& end) {
  if (index >= nb.raw_offset.size()) return false;
  const auto& raw = nb.raw_offset[index];
  if (raw.empty() || end <= begin || end >= raw.size()) return false;
  // Every byte must come from its own raw byte, consecutively (no escapes inside the range).
  for (std::uint32_t k = begin; k + 1 < end; ++k)
    if (raw[k + 1] != raw[k] + 1) return false;
  const std::uint32_t b = raw[begin], e = raw[end - 1] + 1;
  begin = b;
  end = e;
  return true;
}

}  // namespace lmcore::upgrade
