#include "core/roofline.h"

#include <algorithm>

namespace shamn {

const char* memory_level_name(MemoryLevel level) {
  static const char* const names[kMemoryLevels] = {"L2", "L3", "DRAM"};
  return names[static_cast<int>(level)];
}

bool RooflineLimits::valid() const {
  if (!(flops_per_s > 0)) return false;
  for (double b : bytes_per_s)
    if (!(b > 0)) return false;
  for (double c : capacity_bytes)
    if (!(c > 0)) return false;
  return true;
}

MemoryLevel memory_level(double bytes, const RooflineLimits& limits) {
  if (bytes <= limits.capacity_bytes[0]) return MemoryLevel::l2;
  if (bytes <= limits.capacity_bytes[1]) return MemoryLevel::l3;
  return MemoryLevel::dram;
}

double roofline_bound_ns(double flops, double bytes, const RooflineLimits& limits) {
  if (!limits.valid()) return 0;
  const double compute = flops / limits.flops_per_s;
  const double memory = bytes / limits.bytes_per_s[static_cast<int>(memory_level(bytes, limits))];
  return 1e9 * std::max(compute, memory);
}

}  // namespace shamn
