// lmcore/upgrade/report.h — the output formats of `lmcore upgrade-check`.
//
//   fmt::print("{}", upgrade::format_findings(result.findings, upgrade::OutputFormat::sarif));
//
//  text    `path:line:col: CODE [*] message` (flake8/ruff style; `[*]` marks fixable findings;
//          notebooks as `path:cell N:line:col: ...`, like ruff)
//  json    a JSON array of {code, message, filename, cell, line, column, end_line, end_column,
//          confidence, fix: {replacement} | null}
//  sarif   SARIF 2.1.0, one run, every rule in tool.driver.rules
//  github  GitHub Actions workflow commands (`::error title=...,file=...,line=...::...`)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcore/upgrade/rules.h"

namespace lmcore::upgrade {

enum class OutputFormat { text, json, sarif, github };

std::optional<OutputFormat> output_format_from_name(std::string_view name);
std::string format_findings(const std::vector<Finding>& findings, OutputFormat format);

// `--rules`: every code with its summary and explanation, as text.
std::string format_rules();

}  // namespace lmcore::upgrade
