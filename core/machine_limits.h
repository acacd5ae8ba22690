#pragma once
// This machine's own limits, measured (`shamn machine`; `--profile` takes its
// roofline from them): f32 FMA peak at the kernel level in use, bf16 dot
// products where the CPU has AVX512_BF16, and the bandwidth of a read stream and
// of an update stream (y += x: two reads, one write) from buffers sized for L2,
// L3 and DRAM, 64-byte aligned (a buffer 16 bytes off read a quarter to a third
// slower: every vector load split two lines); each on one thread and on
// `threads` threads at once. The L3's size is the OS's, or less where one
// core's reads over growing buffers fall from twice DRAM's rate to near
// DRAM's sooner (cache_knee_bytes).
//
// Every probe runs a short timed loop (about `probe_seconds`) `repeats` times
// and keeps the median. A rate is work per second of the CPU time each thread
// ran (summed over threads): time-slicing with other jobs does not lower it, but
// sharing caches and memory with them does, so say what else ran. The threads
// are not pinned.
#include <cstdint>
#include <string>

#include "core/roofline.h"

namespace shamn {

struct MachineProbeOptions {
  int threads = 1;  // "all cores": the threads a run would use
  int repeats = 5;
  double probe_seconds = 0.05;
};

// A rate on one thread and on all of them together (FLOP/s or bytes/s).
struct ProbeRate {
  double one = 0, all = 0;
};

struct MachineLimits {
  std::string kernel;  // the SIMD level the probes ran at (core/kernel_level.h)
  int threads = 1;
  int repeats = 0;
  int64_t l2_bytes = 0;              // per core
  int64_t l3_bytes = 0;              // shared: what the probes and the roofline take
  int64_t l3_reported_bytes = 0;     // what the OS said (a VM may pass its host's through)
  bool cache_sizes_assumed = false;  // the OS did not say; 1 MiB and 32 MiB (reported) taken
  ProbeRate f32_flops;
  bool bf16_available = false;
  ProbeRate bf16_flops;  // zero where not available
  // Per-thread buffer sizes and rates of the L2, L3 and DRAM probes
  // (MemoryLevel order). One thread's DRAM rates read thread 0's buffer, which
  // holds the whole DRAM probe (at least twice the reported L3), so they stay
  // DRAM's at any thread count. An update moves 12 bytes per element: x and y
  // read, y written.
  int64_t read_buffer_bytes[kMemoryLevels] = {};
  // What one core's probe of each level reads: its per-thread buffer, but the
  // whole DRAM probe for DRAM.
  int64_t one_core_buffer_bytes[kMemoryLevels] = {};
  ProbeRate read_bytes[kMemoryLevels];
  ProbeRate update_bytes[kMemoryLevels];
};

MachineLimits measure_machine_limits(const MachineProbeOptions& options);

// One core's read rate by buffer size (ascending sizes), against its rate from
// DRAM: the largest size still read at least twice as fast as DRAM, where a
// larger size in the curve falls below that, none after it rises back, and one
// comes down to 1.5x DRAM or less (the L3's capacity as the reads see it); 0
// where no size falls so (the curve ends inside the cache, or no cache is
// faster than DRAM). A VM can report its host's whole L3 (508 MiB on a 2-core
// Zen 5 VM whose reads fall towards DRAM speed past 16-32 MiB): the L3 probe's
// buffer, sized from that, then measured DRAM, and every op's bytes looked
// L3-resident (experiments/roofline.md, stop 56).
int64_t cache_knee_bytes(const int64_t* sizes, const double* rates, int count, double dram_rate);

// The figures a run on limits.threads threads is bound by: the all-thread rates
// (per level the faster of read and update, so an op that writes as much as it
// reads is not held to the read stream's figure), L2 capacity per core x threads.
RooflineLimits roofline_limits(const MachineLimits& limits);

}  // namespace shamn
