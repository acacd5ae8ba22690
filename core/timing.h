#pragma once
// Wall-clock timing for progress lines and benchmarks: one stopwatch and one
// median, so every figure shamn prints is taken and summarised the same way.
#include <algorithm>
#include <chrono>
#include <vector>

namespace shamn {

// Seconds since construction or the last restart(), on the monotonic clock.
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void restart() { start_ = Clock::now(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// The median (the mean of the two middle values for an even count); 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t n = values.size();
  std::sort(values.begin(), values.end());
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace shamn
