#pragma once
// What the trainer prints while it runs. On a terminal (log.progress = "auto" or
// "always") a live status line is redrawn every step and kept every log.every
// steps; otherwise (a pipe or a file, or "never") plain lines every log.every steps.
#include <cstdint>
#include <string>

namespace shamn {

struct StepReport {
  int64_t step = 0;  // 1-based: steps done
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0;  // averaged over recent steps
  double eta_s = 0;
  bool skipped = false;
};

class Progress {
 public:
  Progress(const std::string& mode, int64_t total_steps, int64_t every);
  void step(const StepReport& r);
  void line(const std::string& text);  // a message of its own, e.g. an evaluation
  bool live() const { return live_; }

 private:
  std::string format(const StepReport& r) const;
  int64_t total_, every_;
  bool live_;
  bool dirty_ = false;  // a live line is on screen without its newline
};

std::string format_duration(double seconds);  // "42s", "3m12s", "2h05m"

}  // namespace shamn
