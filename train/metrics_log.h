#pragma once
// metrics.jsonl in the run directory: one JSON object per line, each starting
// with "step". Training records carry loss, ce, aux, lr, grad_norm, tokens_per_s,
// elapsed_s and skipped; evaluation records carry val_loss and val_ppl.
// Non-finite numbers are written as null (JSON has no NaN).
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace shamn {

class MetricsLog {
 public:
  // Starts `path` afresh, or on resume keeps the records up to and including
  // `resume_step` (the resumed run writes the later ones again, identically).
  MetricsLog(const std::string& path, bool resume, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Numbers are written in the shortest form that reads back as the same double.
  void write(int64_t step, const std::vector<std::pair<std::string, double>>& fields);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace shamn
