#include "core/process_memory.h"

#include <cstdio>
#include <cstring>

namespace shamn {

namespace {
int64_t status_kib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kib = 0;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof(line), f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      std::sscanf(line + n + 1, "%lld", &kib);
      break;
    }
  std::fclose(f);
  return kib;
}
}  // namespace

int64_t current_rss_bytes() { return status_kib("VmRSS") * 1024; }
int64_t peak_rss_bytes() { return status_kib("VmHWM") * 1024; }

}  // namespace shamn
