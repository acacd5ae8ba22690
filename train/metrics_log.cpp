#include "train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/fault.h"

namespace shamn {

MetricsLog::MetricsLog(const std::string& path, bool resume, int64_t resume_step) : path_(path) {
  if (resume && std::filesystem::exists(path)) {
    std::string kept;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      // A run killed mid-append leaves a torn last line: only whole records count.
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
          record["step"].get<int64_t>() <= resume_step)
        kept += line + "\n";
    }
    // Rewritten atomically: a crash here cannot lose the history.
    write_file_atomically(path, kept, "metrics");
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (resume ? 0 : O_TRUNC), 0644);
  SHAMN_INPUT_CHECK(fd_ >= 0, "cannot open metrics file '", path, "' for writing: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(int64_t step, const std::vector<std::pair<std::string, double>>& fields) {
  // "step" first, in insertion order: a resume finds a record's step at the start of its line.
  nlohmann::ordered_json record = {{"step", step}};
  for (const auto& [name, value] : fields) record[name] = value;  // not finite: null
  const std::string line = record.dump() + "\n";
  // One write() per record, unbuffered: a killed run keeps every record it printed.
  // A fault strikes after half the line, to leave the torn record a real crash can.
  const bool fault_due = fault::due("metrics.append");
  size_t size = fault_due ? line.size() / 2 : line.size();
  const char* p = line.data();
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    SHAMN_INPUT_CHECK(n > 0, "appending to metrics file '", path_, "' failed: ", std::strerror(errno),
                      " (disk full?)");
    p += n;
    size -= static_cast<size_t>(n);
  }
  if (fault_due) {
    const int err = fault::strike("metrics.append");
    SHAMN_INPUT_CHECK(err == 0, "appending to metrics file '", path_, "' failed: ", std::strerror(err),
                      " (disk full?)");
  }
}

}  // namespace shamn
