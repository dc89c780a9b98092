#include "lmcore/train/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "lmcore/core/error.h"

namespace lmcore::train {

Schedule schedule_from_name(std::string_view name) {
  if (name == "cosine") return Schedule::cosine;
  if (name == "wsd") return Schedule::wsd;
  if (name == "constant") return Schedule::constant;
  fail("learning-rate schedule '{}' is not one of cosine, wsd, constant", name);
}

std::string_view schedule_name(Schedule s) {
  switch (s) {
    case Schedule::cosine: return "cosine";
    case Schedule::wsd: return "wsd";
    case Schedule::constant: return "constant";
  }
  return "?";
}

void LrSchedule::validate() const {
  LMCORE_CHECK(std::isfinite(lr) && lr > 0, "learning rate must be > 0, found {}", lr);
  LMCORE_CHECK(max_steps >= 1, "max steps must be >= 1, found {}", max_steps);
  LMCORE_CHECK(warmup >= 0, "warmup must be >= 0 steps, found {}", warmup);
  LMCORE_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "min_lr_ratio must be in [0, 1], found {}", min_lr_ratio);
  LMCORE_CHECK(decay_fraction > 0 && decay_fraction <= 1, "decay fraction must be in (0, 1], found {}", decay_fraction);
}

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double min_lr = lr * min_lr_ratio;
  switch (kind) {
    case Schedule::constant: return lr;
    case Schedule::cosine: {
      if (max_steps <= warmup) return lr;
      const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(max_steps - warmup));
      return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
    }
    case Schedule::wsd: {
      const auto decay_steps = static_cast<std::int64_t>(std::ceil(decay_fraction * static_cast<double>(max_steps)));
      const std::int64_t decay_start = std::max(warmup, max_steps - decay_steps);
      if (step < decay_start) return lr;
      const double progress = std::min(1.0, static_cast<double>(step - decay_start + 1) /
                                                static_cast<double>(std::max<std::int64_t>(1, max_steps - decay_start)));
      return lr + (min_lr - lr) * progress;
    }
  }
  return lr;
}

}  // namespace lmcore::train
