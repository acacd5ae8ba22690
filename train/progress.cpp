#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace shamn {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof(buf), "%llds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s / 60) % 60);
  return buf;
}

Progress::Progress(const std::string& mode, int64_t total_steps, int64_t every)
    : total_(total_steps),
      every_(every),
      live_(mode == "always" || (mode == "auto" && ::isatty(STDOUT_FILENO))) {}

std::string Progress::format(const StepReport& r) const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "step %*lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | ETA %s%s",
                static_cast<int>(std::to_string(total_).size()), static_cast<long long>(r.step),
                static_cast<long long>(total_), r.loss, r.lr, r.grad_norm, r.tokens_per_s,
                format_duration(r.eta_s).c_str(), r.skipped ? " | SKIPPED (non-finite)" : "");
  return buf;
}

void Progress::step(const StepReport& r) {
  const bool keep = r.step % every_ == 0 || r.step == total_ || r.step == 1 || r.skipped;
  if (live_) {
    std::printf("\r\033[K%s%s", format(r).c_str(), keep ? "\n" : "");
    dirty_ = !keep;
  } else if (keep) {
    std::printf("%s\n", format(r).c_str());
  }
  std::fflush(stdout);
}

void Progress::line(const std::string& text) {
  if (dirty_) std::printf("\r\033[K");
  dirty_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace shamn
