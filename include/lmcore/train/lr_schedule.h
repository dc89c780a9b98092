// lmcore/train/lr_schedule.h — the learning rate of each optimizer step.
//
//   cosine:  linear warmup from lr / warmup to lr over `warmup` steps (llm.c's (step + 1) / warmup),
//            then cosine decay to min_lr = lr * min_lr_ratio at max_steps.
//   wsd:     warmup-stable-decay: the same warmup, lr until the last decay_fraction of the steps, then
//            a linear decay to min_lr at max_steps.
//   constant: warmup, then lr.
// Steps count from 0; step max_steps - 1 is the last.
#pragma once

#include <cstdint>
#include <string_view>

namespace lmcore::train {

enum class Schedule : std::uint8_t { cosine = 0, wsd = 1, constant = 2 };
// "cosine" | "wsd" | "constant"; throws Error naming the string otherwise.
Schedule schedule_from_name(std::string_view name);
std::string_view schedule_name(Schedule s);

struct LrSchedule {
  Schedule kind = Schedule::cosine;
  double lr = 1e-3;
  std::int64_t warmup = 0;
  std::int64_t max_steps = 1;
  double min_lr_ratio = 0.1;
  double decay_fraction = 0.2;  // wsd

  void validate() const;  // throws Error naming the field
  double at(std::int64_t step) const;
};

}  // namespace lmcore::train
