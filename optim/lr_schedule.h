#pragma once
#include <cstdint>

namespace shamn {

// Linear warm-up then cosine decay (SPEC 3). For the 0-based step s:
//   s <  warmup:         lr * (s + 1) / warmup
//   warmup <= s < max:   min_lr + (lr - min_lr) * (1 + cos(pi * (s - warmup) / (max - warmup))) / 2
//   s >= max:            min_lr
struct LrSchedule {
  double lr = 3e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t max_steps = 1;

  void validate() const;  // throws naming the offending field
  double at(int64_t step) const;
};

}  // namespace shamn
