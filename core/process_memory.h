#pragma once
// This process's memory use as the kernel accounts it (Linux /proc/self/status).
#include <cstdint>

namespace shamn {

int64_t current_rss_bytes();  // VmRSS; 0 where unavailable
int64_t peak_rss_bytes();     // VmHWM; 0 where unavailable

}  // namespace shamn
