#include "train/metrics_log.h"

#include <cinttypes>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/check.h"

namespace shamn {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

MetricsLog::MetricsLog(const std::string& path, bool resume, int64_t resume_step) : path_(path) {
  std::string kept;
  if (resume && std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      long long step = 0;
      if (std::sscanf(line.c_str(), "{\"step\":%lld", &step) == 1 && step <= resume_step)
        kept += line + "\n";
    }
    // Rewritten atomically: a crash here cannot lose the history.
    AtomicFile file(path);
    file.write(kept.data(), kept.size());
    file.commit();
  }
  file_ = std::fopen(path.c_str(), resume ? "ab" : "wb");
  SHAMN_INPUT_CHECK(file_ != nullptr, "cannot open metrics file '", path, "' for writing");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(int64_t step, const std::vector<std::pair<std::string, double>>& fields) {
  std::string line = "{\"step\":" + std::to_string(step);
  for (const auto& [name, value] : fields) line += ",\"" + name + "\":" + json_number(value);
  line += "}\n";
  std::fputs(line.c_str(), file_);
  std::fflush(file_);  // a killed run keeps every record it printed
}

}  // namespace shamn
