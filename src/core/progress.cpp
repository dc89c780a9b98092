#include "lmcore/core/progress.h"

#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

namespace lmcore {

Progress::Progress(std::string label, std::int64_t total, std::string unit, std::FILE* out, double log_interval_seconds,
                   std::int64_t initial)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      initial_(initial),
      out_(out),
      tty_(out != nullptr && ::isatty(::fileno(out)) == 1),
      log_interval_(log_interval_seconds),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  if (drawn_ && !finished_ && tty_) std::fputc('\n', out_);
}

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  // Past 100 days in days, in floating point: an ETA for --max-steps 2^63 - 1 overflowed llround.
  if (s >= 100 * 86400.0) return fmt::format("{:.0f}d", s / 86400);
  const auto t = static_cast<std::int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

void Progress::update(std::int64_t done, const std::string& extra) {
  last_done_ = done;
  last_extra_ = extra;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (drawn_ && since < (tty_ ? 0.1 : log_interval_)) return;
  draw(done, extra, false);
}

void Progress::finish(const std::string& extra) {
  if (finished_) return;
  draw(last_done_, extra.empty() ? last_extra_ : extra, true);
  finished_ = true;
}

void Progress::draw(std::int64_t done, const std::string& extra, bool final) {
  if (out_ == nullptr) return;
  last_draw_ = std::chrono::steady_clock::now();
  drawn_ = true;
  const double secs = elapsed();
  const double rate = secs > 0 ? static_cast<double>(done - initial_) / secs : 0.0;
  std::string line = total_ > 0 ? fmt::format("{} {}/{} {}", label_, done, total_, unit_) : fmt::format("{} {} {}", label_, done, unit_);
  if (!extra.empty()) line += " | " + extra;
  if (final) {
    line += fmt::format(" | done in {}", format_duration(secs));
  } else if (total_ > 0 && rate > 0) {
    line += fmt::format(" | ETA {}", format_duration(static_cast<double>(total_ - done) / rate));
  }
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace lmcore
