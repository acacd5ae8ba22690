#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/check.h"

namespace shamn {

void LrSchedule::validate() const {
  SHAMN_INPUT_CHECK(lr > 0 && std::isfinite(lr), "optim.lr must be a positive number, got ", lr);
  SHAMN_INPUT_CHECK(min_lr >= 0 && min_lr <= lr, "optim.min_lr must lie in [0, optim.lr = ", lr, "], got ",
                    min_lr);
  SHAMN_INPUT_CHECK(max_steps >= 1, "train.max_steps must be at least 1, got ", max_steps);
  SHAMN_INPUT_CHECK(warmup_steps >= 0 && warmup_steps <= max_steps,
                    "optim.warmup_steps must lie in [0, train.max_steps = ", max_steps, "], got ",
                    warmup_steps);
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (step >= max_steps) return min_lr;
  const double progress = static_cast<double>(step - warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, max_steps - warmup_steps));
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace shamn
