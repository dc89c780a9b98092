// Reads the code cells of a Jupyter notebook for upgrade-check; see include/lmcore/upgrade/notebook.h.
#include "lmcore/upgrade/notebook.h"

#include <nlohmann/json.hpp>

#include "lmcore/core/error.h"

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
  } catch (const nlohmann::json::parse_error& e) {
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
  Notebook out;
  int number = 0;
  for (const auto& c : *cells) {
    ++number;
    if (!c.is_object() || c.value("cell_type", "") != "code") continue;
    std::string src = cell_source(c.contains("source") ? c["source"] : c.value("input", nlohmann::json()));
    blank_magics(src, number, out.shell_lines);
    out.code.push_back(std::move(src));
    out.cell_number.push_back(number);
  }
  return out;
}

}  // namespace lmcore::upgrade
