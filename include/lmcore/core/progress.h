// lmcore/core/progress.h — one live progress line for long-running commands: count/total, rate, ETA
// and whatever the caller adds (loss, MB/s, ...).
//
//   Progress p("train", max_steps, "step");
//   for (...) p.update(step + 1, fmt::format("loss {:.4f}", loss));
//   p.finish();
//
// On a terminal the line is redrawn in place (at most 10 times a second); otherwise (a log file, CI) a
// plain line is written at most every `log_interval` seconds and at the end, so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lmcore {

class Progress {
 public:
  // `initial`: work already done before this process started (a resumed run): the rate and the ETA
  // count only what this process does.
  Progress(std::string label, std::int64_t total, std::string unit, std::FILE* out = stderr,
           double log_interval_seconds = 10.0, std::int64_t initial = 0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` of `total` finished; `extra` is appended to the line.
  void update(std::int64_t done, const std::string& extra = "");
  // Writes the final line (and a newline on a terminal).
  void finish(const std::string& extra = "");
  // Seconds since construction.
  double elapsed() const;
  // "1h02m", "3m05s", "12s"
  static std::string format_duration(double seconds);

 private:
  void draw(std::int64_t done, const std::string& extra, bool final);
  std::string label_, unit_;
  std::int64_t total_, initial_;
  std::FILE* out_;
  bool tty_;
  double log_interval_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false, finished_ = false;
  std::int64_t last_done_ = 0;
  std::string last_extra_;
};

}  // namespace lmcore
