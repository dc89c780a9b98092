#include "lmcore/train/run_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lmcore/base/atomic_file.h"
#include "lmcore/core/error.h"

namespace lmcore::train {

using json = nlohmann::json;

RunLog::RunLog(const std::string& path, bool append) : path_(path) {
  if (append) {
    std::ifstream in(path);
    std::string line;
    std::int64_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      // A line cut short by a crash is skipped, not fatal: the log is a record, not state.
      const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("event")) continue;
      const std::string ev = j.value("event", "");
      if (ev == "step") {
        StepRecord r;
        r.step = j.value("step", std::int64_t{0});
        r.loss = j.value("loss", 0.0);
        r.lr = j.value("lr", 0.0);
        r.grad_norm = j.value("grad_norm", 0.0);
        r.tokens_per_s = j.value("tokens_per_s", 0.0);
        r.mfu = j.value("mfu", 0.0);
        r.elapsed_s = j.value("elapsed_s", 0.0);
        r.step_s = j.value("step_s", 0.0);
        r.comm_wait_s = j.value("comm_wait_s", 0.0);
        steps_.push_back(r);
      } else if (ev == "eval") {
        evals_.push_back({j.value("step", std::int64_t{0}), j.value("val_loss", 0.0)});
      } else if (ev != "checkpoint" && ev != "start" && ev != "end") {
        marks_.emplace_back(j.value("step", std::int64_t{0}), j.value("label", ev));
      }
    }
  }
  // A process killed mid-line (elastic training goes on with another lead) left no newline: the next
  // record starts on a line of its own.
  bool needs_newline = false;
  if (append) {
    std::ifstream tail(path, std::ios::binary | std::ios::ate);
    if (tail && tail.tellg() > 0) {
      tail.seekg(-1, std::ios::end);
      needs_newline = tail.get() != '\n';
    }
  }
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  LMCORE_CHECK(file_ != nullptr, "metrics log '{}': cannot open for writing: {}", path, std::strerror(errno));
  if (needs_newline) std::fputc('\n', file_);
}

RunLog::~RunLog() {
  if (file_) std::fclose(file_);
}

void RunLog::write_line(const json& j) {
  const std::string s = j.dump() + "\n";
  std::fwrite(s.data(), 1, s.size(), file_);
  std::fflush(file_);
}

namespace {
// NaN and infinities are not JSON: written as null (the step is still logged).
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

void RunLog::step(const StepRecord& r) {
  steps_.push_back(r);
  write_line({{"event", "step"}, {"step", r.step}, {"loss", number(r.loss)}, {"lr", r.lr},
              {"grad_norm", number(r.grad_norm)}, {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
              {"elapsed_s", r.elapsed_s}, {"step_s", r.step_s}, {"comm_wait_s", r.comm_wait_s}});
}

void RunLog::eval(const EvalRecord& r) {
  evals_.push_back(r);
  write_line({{"event", "eval"}, {"step", r.step}, {"val_loss", number(r.val_loss)}});
}

void RunLog::event(const std::string& name, json fields) {
  LMCORE_CHECK(fields.is_object(), "RunLog::event: fields must be an object");
  fields["event"] = name;
  if (name != "checkpoint" && name != "start" && name != "end")
    marks_.emplace_back(fields.value("step", std::int64_t{0}), fields.value("label", name));
  write_line(fields);
}

namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// 1, 2 or 5 times a power of ten: the spacing of about `n` ticks over `range`.
double nice_step(double range, int n) {
  const double raw = range / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.1e}", v);
  return fmt::format("{:.4g}", v);
}

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series, const std::vector<std::pair<double, std::string>>& marks,
                           int width, int height) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::string o = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                              "font-family=\"sans-serif\" font-size=\"11\">\n",
                              width, height, width, height);
  o += fmt::format("<text x=\"{}\" y=\"16\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                   width / 2, escape(title));
  if (!std::isfinite(x0)) {
    o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data yet</text>\n</svg>\n", width / 2, height / 2);
    return o;
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1, y0 = y0 - 1;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  const double L = 64, R = width - 16.0, T = 28, B = height - 40.0;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (R - L); };
  auto py = [&](double y) { return B - (y - y0) / (y1 - y0) * (B - T); };
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", L, T, R - L, B - T);
  const double ys = nice_step(y1 - y0, 5);
  for (double v = std::ceil(y0 / ys) * ys; v <= y1; v += ys) {
    o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
                     "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                     L, R, py(v), py(v), L - 4, py(v) + 4, tick_label(v));
  }
  const double xs = nice_step(x1 - x0, 6);
  for (double v = std::ceil(x0 / xs) * xs; v <= x1; v += xs)
    o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(v), B + 14, tick_label(v));
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (L + R) / 2, height - 6, escape(x_label));
  o += fmt::format("<text x=\"12\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {})\">{}</text>\n",
                   (T + B) / 2, (T + B) / 2, escape(y_label));
  for (const auto& [x, label] : marks) {
    if (x < x0 || x > x1) continue;
    o += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"#c33\" stroke-dasharray=\"4 3\"/>"
                     "<text x=\"{:.1f}\" y=\"{}\" fill=\"#c33\">{}</text>\n",
                     px(x), px(x), T, B, px(x) + 3, T + 12, escape(label));
  }
  int legend = 0;
  for (const Series& s : series) {
    std::string pts;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", s.color, pts);
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                     R - 150, T + 10 + 14 * legend, s.color, R - 136, T + 14 + 14 * legend, escape(s.label));
    ++legend;
  }
  o += "</svg>\n";
  return o;
}

void RunLog::write_report(const std::string& html_path, const std::string& title,
                          const std::vector<std::pair<std::string, std::string>>& summary) const {
  Series train{"train loss", "#1f77b4", {}}, val{"validation loss", "#d62728", {}}, tps{"tokens/s", "#2ca02c", {}};
  // A run that went back to a checkpoint (a resume from an older one, an elastic recovery) logged some
  // steps twice: the curve shows the history that continued, so a step replaces those at or after it.
  for (const StepRecord& r : steps_) {
    while (!train.points.empty() && train.points.back().first >= static_cast<double>(r.step)) {
      train.points.pop_back();
      tps.points.pop_back();
    }
    train.points.emplace_back(static_cast<double>(r.step), r.loss);
    tps.points.emplace_back(static_cast<double>(r.step), r.tokens_per_s);
  }
  for (const EvalRecord& r : evals_) val.points.emplace_back(static_cast<double>(r.step), r.val_loss);
  std::vector<std::pair<double, std::string>> marks;
  for (const auto& [s, l] : marks_) marks.emplace_back(static_cast<double>(s), l);
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + escape(title) +
                  "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
                  "td{padding:2px 12px 2px 0}td:first-child{color:#666}</style></head><body>\n";
  h += "<h1>" + escape(title) + "</h1>\n<table>\n";
  for (const auto& [k, v] : summary) h += "<tr><td>" + escape(k) + "</td><td>" + escape(v) + "</td></tr>\n";
  h += "</table>\n";
  std::vector<Series> losses = {train};
  if (!val.points.empty()) losses.push_back(val);
  h += svg_line_chart("Loss", "step", "loss (nats/token)", losses, marks);
  h += svg_line_chart("Throughput", "step", "tokens/s", {tps}, marks);
  h += "</body></html>\n";
  // Rewritten as the run goes; atomic so a browser never shows half a page, not fsynced (it is redrawn
  // from metrics.jsonl at any time).
  base::write_file_atomically(html_path, h, {.what = "report", .durable = false});
}

}  // namespace lmcore::train
