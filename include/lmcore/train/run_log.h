// lmcore/train/run_log.h — what a training run records: a JSON-lines metrics log, and at the end a
// self-contained report.html with the loss curves and throughput drawn as inline SVG.
//
// Each line of the log is one JSON object with an "event" field:
//   {"event":"step","step":12,"loss":4.81,"lr":0.0006,"grad_norm":1.9,"tokens_per_s":5120,"mfu":0.41,"elapsed_s":31.2,
//    "step_s":0.4,"comm_wait_s":0.01}
//   {"event":"eval","step":50,"val_loss":4.55}
//   {"event":"checkpoint","step":100,"path":"runs/x/checkpoints/step_00000100","seconds":0.4}
//   {"event":"start" | "resume" | "interrupted" | "diverged" | "end", ...}
// A resumed run appends to the same log and its report shows the whole history.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lmcore::train {

struct StepRecord {
  std::int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, mfu = 0, elapsed_s = 0;
  double step_s = 0;       // wall time of the step
  double comm_wait_s = 0;  // sharded training: time waiting on collectives in the step (exposed)
};
struct EvalRecord {
  std::int64_t step = 0;
  double val_loss = 0;
};

class RunLog {
 public:
  // Opens (creating or, with append, continuing) the log at `path`. With append, the records already in
  // the file are read back for the report.
  RunLog(const std::string& path, bool append);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void step(const StepRecord& r);
  void eval(const EvalRecord& r);
  // Any other event: `fields` must be an object; "event" is added.
  void event(const std::string& name, nlohmann::json fields);

  const std::vector<StepRecord>& steps() const { return steps_; }
  const std::vector<EvalRecord>& evals() const { return evals_; }
  const std::string& path() const { return path_; }

  // Writes report.html (atomically): title, a table of `summary` (key -> value), the train and
  // validation loss against the step, tokens/s against the step, and markers at `events`' steps.
  void write_report(const std::string& html_path, const std::string& title,
                    const std::vector<std::pair<std::string, std::string>>& summary) const;

 private:
  void write_line(const nlohmann::json& j);
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<StepRecord> steps_;
  std::vector<EvalRecord> evals_;
  std::vector<std::pair<std::int64_t, std::string>> marks_;  // (step, label) for resume/interrupt/... events
};

// The SVG of a line chart: series of (x, y) points, each with a label and a colour; `marks` draws
// dashed vertical lines with labels. Self-contained (no scripts), for report.html.
struct Series {
  std::string label, color;
  std::vector<std::pair<double, double>> points;
};
std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series,
                           const std::vector<std::pair<double, std::string>>& marks = {}, int width = 720,
                           int height = 320);

}  // namespace lmcore::train
