// Output formats of upgrade-check; see include/lmcore/upgrade/report.h.
#include "lmcore/upgrade/report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lmcore/upgrade/dim_params.h"

namespace lmcore::upgrade {

using ojson = nlohmann::ordered_json;

std::optional<OutputFormat> output_format_from_name(std::string_view name) {
  if (name == "text" || name == "concise" || name == "full") return OutputFormat::text;
  if (name == "json") return OutputFormat::json;
  if (name == "sarif") return OutputFormat::sarif;
  if (name == "github") return OutputFormat::github;
  return std::nullopt;
}

namespace {

std::string location_text(const Finding& f) {
  if (f.cell > 0) return fmt::format("{}:cell {}:{}:{}", f.path, f.cell, f.line, f.col);
  return fmt::format("{}:{}:{}", f.path, f.line, f.col);
}

std::string text_line(const Finding& f) {
  return fmt::format("{}: {} {}{}\n", location_text(f), f.code, f.fix ? "[*] " : "", f.message);
}

ojson json_finding(const Finding& f) {
  ojson j;
  j["code"] = f.code;
  j["message"] = f.message;
  j["filename"] = f.path;
  j["cell"] = f.cell > 0 ? ojson(f.cell) : ojson(nullptr);
  j["line"] = f.line;
  j["column"] = f.col;
  j["end_line"] = f.end_line;
  j["end_column"] = f.end_col;
  j["confidence"] = confidence_name(f.confidence);
  if (f.fix) {
    j["fix"] = ojson{{"replacement", f.fix->replacement}};
  } else {
    j["fix"] = nullptr;
  }
  return j;
}

ojson sarif(const std::vector<Finding>& findings) {
  ojson rules = ojson::array();
  for (const auto& r : all_rules()) {
    rules.push_back(ojson{{"id", r.code},
                          {"name", r.name},
                          {"shortDescription", {{"text", r.summary}}},
                          {"fullDescription", {{"text", r.explanation}}},
                          {"help", {{"text", r.explanation}}},
                          {"properties", {{"fixable", r.fixable}}}});
  }
  ojson results = ojson::array();
  for (const auto& f : findings) {
    int rule_index = 0;
    for (const auto& r : all_rules()) {
      if (r.code == f.code) break;
      ++rule_index;
    }
    ojson region{{"startLine", f.line}, {"startColumn", f.col}, {"endLine", f.end_line}, {"endColumn", f.end_col}};
    ojson result{{"ruleId", f.code},
                 {"ruleIndex", rule_index},
                 {"level", f.code.rfind("UPG9", 0) == 0 ? "error" : "warning"},
                 {"message", {{"text", f.cell > 0 ? fmt::format("cell {}: {}", f.cell, f.message) : f.message}}},
                 {"locations", ojson::array({ojson{{"physicalLocation",
                                                    {{"artifactLocation", {{"uri", f.path}}}, {"region", region}}}}})}};
    ojson props{{"confidence", confidence_name(f.confidence)}};
    if (f.cell > 0) props["cell"] = f.cell;
    result["properties"] = props;
    if (f.fix) {
      result["fixes"] = ojson::array({ojson{
          {"description", {{"text", fmt::format("rename to {}", f.fix->replacement)}}},
          {"artifactChanges",
           ojson::array({ojson{{"artifactLocation", {{"uri", f.path}}},
                               {"replacements", ojson::array({ojson{{"deletedRegion", region},
                                                                     {"insertedContent", {{"text", f.fix->replacement}}}}})}}})}}});
    }
    results.push_back(std::move(result));
  }
  return ojson{{"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
               {"version", "2.1.0"},
               {"runs", ojson::array({ojson{{"tool", {{"driver", {{"name", "lmcore upgrade-check"},
                                                                  {"informationUri", "https://github.com/lmcore/lmcore"},
                                                                  {"rules", rules}}}}},
                                            {"results", results}}})}};
}

// GitHub workflow-command escaping: data escapes %, CR, LF; properties also ':' and ','.
std::string gh_data(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '%') out += "%25";
    else if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else out += c;
  }
  return out;
}
std::string gh_prop(std::string_view s) {
  std::string out;
  for (char c : gh_data(s)) {
    if (c == ':') out += "%3A";
    else if (c == ',') out += "%2C";
    else out += c;
  }
  return out;
}

}  // namespace

std::string format_findings(const std::vector<Finding>& findings, OutputFormat format) {
  std::string out;
  switch (format) {
    case OutputFormat::text:
      for (const auto& f : findings) out += text_line(f);
      return out;
    case OutputFormat::json: {
      ojson arr = ojson::array();
      for (const auto& f : findings) arr.push_back(json_finding(f));
      return arr.dump(2) + "\n";
    }
    case OutputFormat::sarif:
      return sarif(findings).dump(2) + "\n";
    case OutputFormat::github:
      for (const auto& f : findings) {
        out += fmt::format("::{} title={},file={},line={},col={},endLine={},endColumn={}::{}\n",
                           f.code.rfind("UPG9", 0) == 0 ? "error" : "warning",
                           gh_prop(fmt::format("upgrade-check ({})", f.code)), gh_prop(f.path), f.line, f.col,
                           f.end_line, f.end_col,
                           gh_data(fmt::format("{}: {} {}", location_text(f), f.code, f.message)));
      }
      return out;
  }
  return out;
}

std::string format_rules() {
  std::string out;
  for (const auto& r : all_rules()) {
    out += fmt::format("{} {}{}\n    {}\n", r.code, r.name, r.fixable ? " (fixable)" : "", r.summary);
    // Wrap the explanation at ~96 columns.
    std::string line = "    ";
    std::size_t pos = 0;
    const std::string_view e = r.explanation;
    while (pos < e.size()) {
      std::size_t sp = e.find(' ', pos);
      if (sp == std::string_view::npos) sp = e.size();
      const std::string_view word = e.substr(pos, sp - pos);
      if (line.size() + word.size() + 1 > 100 && line.size() > 4) {
        out += line + "\n";
        line = "    ";
      }
      if (line.size() > 4) line += ' ';
      line += word;
      pos = sp + 1;
    }
    out += line + "\n";
    if (r.code == "UPG210") {
      out += "    ops and their dimension parameters (torch 1.13 signatures; function forms also take out=):\n";
      for (const auto& o : all_dim_overloads()) {
        if (o.tensor_method) out += fmt::format("      {}\n", signature_text(o, false));
        if (o.torch_function) out += fmt::format("      {}\n", signature_text(o, true));
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace lmcore::upgrade
