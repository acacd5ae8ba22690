#pragma once
// The roofline that `--profile` holds each op against: the least time in which
// this machine could do an op's arithmetic or move its bytes, whichever is more.
//
//   bound = max(flops / peak, bytes / bandwidth(level))
//
// The level rule: a call's operands live at the first level that holds all of
// them, judged by the call's own minimum bytes: at most the L2 of the threads in
// use (per-core L2 x threads) streams at L2 bandwidth, at most the L3 at L3
// bandwidth, anything larger at DRAM bandwidth. A level's bandwidth is the faster
// of its measured read and update (y += x) streams, so the bound stays below what
// an op that reads and writes can reach.
#include <cstdint>

namespace shamn {

enum class MemoryLevel : uint8_t { l2, l3, dram };
inline constexpr int kMemoryLevels = 3;
const char* memory_level_name(MemoryLevel level);

// Measured by `shamn machine` (core/machine_limits.h) for one thread count.
struct RooflineLimits {
  double flops_per_s = 0;                         // f32 FMA peak of all threads together
  double bytes_per_s[kMemoryLevels] = {};         // bandwidth from L2, L3, DRAM
  double capacity_bytes[kMemoryLevels - 1] = {};  // what L2 (all threads) and L3 hold

  // Every figure positive: bounds can be computed.
  bool valid() const;
};

// The level whose bandwidth a call that moves `bytes` gets (the rule above).
MemoryLevel memory_level(double bytes, const RooflineLimits& limits);

// The least time in nanoseconds for `flops` and `bytes` (0 when limits are not valid).
double roofline_bound_ns(double flops, double bytes, const RooflineLimits& limits);

}  // namespace shamn
