#include "core/machine_limits.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <ctime>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/kernel_level.h"
#include "core/machine_probe_bf16.h"
#include "core/machine_probe_isa.h"

namespace shamn {

namespace {

const machine_probe_isa::Kernels& kernels() {
  static const machine_probe_isa::Kernels* const levels[kKernelLevels] = {&machine_probe_isa::kernels_scalar,
                                                                          &machine_probe_isa::kernels_avx2,
                                                                          &machine_probe_isa::kernels_avx512};
  return for_kernel_level(levels);
}

// Written by every probe so the compiler keeps the loops.
std::atomic<float> g_sink{0};

// "2048K" / "32M" as sysfs writes sizes, in bytes; 0 when unreadable.
int64_t parse_cache_size(std::ifstream& in) {
  int64_t value = 0;
  char unit = 0;
  if (!(in >> value)) return 0;
  in >> unit;
  if (unit == 'K') return value << 10;
  if (unit == 'M') return value << 20;
  return value;
}

// The size of cpu0's cache of `level` (2 or 3), or 0. sysfs first: it says what
// this (virtual) machine has, where sysconf may pass the host's L3 through.
int64_t cache_bytes(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level");
    int found = 0;
    if (!(level_file >> found)) break;
    if (found != level) continue;
    std::ifstream size_file(dir + "size");
    if (const int64_t bytes = parse_cache_size(size_file); bytes > 0) return bytes;
  }
  const long s = sysconf(level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
  return s > 0 ? s : 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds of CPU time this thread has run: a probe's rate is its work over the
// time it actually ran, so other jobs that take the core away for a while (a
// shared machine) do not lower the figure.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Runs work(thread, rounds) on `threads` threads started together, `repeats`
// times; each call returns its units (FLOPs or bytes). The rate of a repeat is
// the sum over threads of each one's units per CPU second. `rounds` is chosen
// from a first short run so a repeat lasts about `seconds`.
template <class Work>
double median_rate(int threads, int repeats, double seconds, Work&& work) {
  int64_t rounds = 1;
  for (;;) {  // calibration on one thread: double until a run takes 5 ms
    const double t0 = thread_cpu_seconds();
    work(0, rounds);
    const double took = thread_cpu_seconds() - t0;
    if (took > 5e-3 || rounds > (int64_t{1} << 40)) {
      rounds = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(rounds) * seconds / took));
      break;
    }
    rounds *= 2;
  }
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> rate(static_cast<size_t>(threads), 0);
    std::barrier sync(threads);
    auto body = [&](int t) {
      work(t, 1);  // warm: the thread's buffer into its caches, the clocks up
      sync.arrive_and_wait();
      const double t0 = thread_cpu_seconds();
      const double units = work(t, rounds);
      rate[static_cast<size_t>(t)] = units / (thread_cpu_seconds() - t0);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
    body(0);
    for (std::thread& th : pool) th.join();
    double total = 0;
    for (double x : rate) total += x;
    rates.push_back(total);
  }
  return median(rates);
}

// The rate of `one` on one thread and of `all` on `threads`.
template <class One, class All>
ProbeRate one_and_all(const MachineProbeOptions& o, One&& one, All&& all) {
  ProbeRate r;
  r.one = median_rate(1, o.repeats, o.probe_seconds, one);
  r.all = o.threads == 1 ? r.one : median_rate(o.threads, o.repeats, o.probe_seconds, all);
  return r;
}

template <class Work>
ProbeRate one_and_all(const MachineProbeOptions& o, Work&& work) {
  return one_and_all(o, work, work);
}

// One buffer a thread, sized for the largest probe and touched once; every
// bandwidth probe reads a prefix of it. A fresh buffer for each probe, touched
// each time, was most of the probe's time where the L3 is large or reported
// so (experiments/roofline.md, stop 55). Each buffer is its own mapping, on
// huge pages where the kernel grants them on request, and unmapped after: the
// advice must not stay on heap memory the run's tensors reuse (AdamW ran
// slower on huge pages, same place).
// Thread 0's buffer may be larger (first_bytes): one core's probes that must
// read DRAM whatever the thread count read it.
class ProbeBuffers {
 public:
  ProbeBuffers(int threads, int64_t bytes, int64_t first_bytes)
      : bytes_(round_up(bytes)), first_bytes_(round_up(std::max(bytes, first_bytes))) {
    try {
      for (int t = 0; t < threads; ++t) map_one(t == 0 ? first_bytes_ : bytes_);
    } catch (...) {  // the destructor does not run for a constructor that throws
      unmap_all();
      throw;
    }
  }
  ProbeBuffers(const ProbeBuffers&) = delete;
  ProbeBuffers& operator=(const ProbeBuffers&) = delete;
  ~ProbeBuffers() { unmap_all(); }
  int64_t bytes() const { return bytes_; }              // every thread's
  int64_t first_bytes() const { return first_bytes_; }  // thread 0's
  float* operator[](int t) const { return huge_page_start(maps_[static_cast<size_t>(t)].first); }

 private:
  static constexpr int64_t kHugePage = int64_t{2} << 20;
  static int64_t round_up(int64_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }
  static float* huge_page_start(void* base) {
    const uintptr_t at = (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) / kHugePage * kHugePage;
    return reinterpret_cast<float*>(at);
  }

  void map_one(int64_t bytes) {
    maps_.reserve(maps_.size() + 1);  // so the push below does not throw once mmap has succeeded
    // 2 MiB more, so a 2 MiB-aligned span of `bytes` lies inside.
    const size_t length = static_cast<size_t>(bytes + kHugePage);
    void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    SHAMN_CHECK(base != MAP_FAILED, "machine limits: out of memory for a probe buffer of ", bytes, " bytes");
    maps_.emplace_back(base, length);
    float* p = huge_page_start(base);
#if defined(MADV_HUGEPAGE)
    madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);  // advice: refused is fine
#endif
    std::fill_n(p, bytes / static_cast<int64_t>(sizeof(float)), 1.0f);
  }
  void unmap_all() noexcept {
    for (const auto& [base, length] : maps_) munmap(base, length);
    maps_.clear();
  }

  int64_t bytes_, first_bytes_;
  std::vector<std::pair<void*, size_t>> maps_;  // what munmap takes back; thread t's is maps_[t]
};

// Reads of `bytes` of each thread's buffer (a multiple of 1 KiB), for median_rate.
auto read_work(const ProbeBuffers& buffers, int64_t bytes) {
  return [&buffers, bytes](int t, int64_t rounds) {
    const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
    const float* x = buffers[t];
    float s = 0;
    for (int64_t i = 0; i < rounds; ++i) s += kernels().read_sum(x, n);
    g_sink.store(s, std::memory_order_relaxed);
    return static_cast<double>(rounds) * static_cast<double>(bytes);
  };
}

void check_fits(const ProbeBuffers& buffers, int64_t bytes, int64_t one_bytes) {
  SHAMN_CHECK(bytes <= buffers.bytes(), "probe of ", bytes, " bytes from a ", buffers.bytes(),
              "-byte buffer");
  SHAMN_CHECK(one_bytes <= buffers.first_bytes(), "one thread's probe of ", one_bytes, " bytes from a ",
              buffers.first_bytes(), "-byte buffer");
}

// Read bandwidth from `bytes` of each thread's buffer, and on one thread from
// `one_bytes` of thread 0's (multiples of 1 KiB).
ProbeRate read_rate(const MachineProbeOptions& o, const ProbeBuffers& buffers, int64_t bytes,
                    int64_t one_bytes) {
  check_fits(buffers, bytes, one_bytes);
  return one_and_all(o, read_work(buffers, one_bytes), read_work(buffers, bytes));
}

// Update bandwidth (y += x) over `bytes` of each thread's buffer, x and y its
// halves, and on one thread over `one_bytes` of thread 0's.
ProbeRate update_rate(const MachineProbeOptions& o, const ProbeBuffers& buffers, int64_t bytes,
                      int64_t one_bytes) {
  check_fits(buffers, bytes, one_bytes);
  const auto& k = kernels();
  auto work = [&](int64_t span) {
    const int64_t n = span / 2 / static_cast<int64_t>(sizeof(float));
    return [&buffers, &k, n](int t, int64_t rounds) {
      float* x = buffers[t];
      float* y = x + n;
      for (int64_t i = 0; i < rounds; ++i) k.add_into(y, x, n);
      g_sink.store(y[0], std::memory_order_relaxed);
      return static_cast<double>(rounds) * 3.0 * static_cast<double>(n) * sizeof(float);
    };
  };
  return one_and_all(o, work(one_bytes), work(bytes));
}

constexpr int kL2 = static_cast<int>(MemoryLevel::l2);
constexpr int kL3 = static_cast<int>(MemoryLevel::l3);
constexpr int kDram = static_cast<int>(MemoryLevel::dram);

int64_t round_to_kib(int64_t bytes) { return std::max<int64_t>(1, bytes >> 10) << 10; }

// The L3 capacity the probes take: the reported one, unless one core's reads,
// over buffers from 4x the L2 doubling up to half the reported L3 (a stream
// through a whole L3 is not all found there), fall from twice DRAM's rate to
// near DRAM's at a smaller size (cache_knee_bytes). The reference is one
// core's DRAM read rate (m.read_bytes[kDram].one, over the whole DRAM probe, at
// least twice the reported L3), which the sweep's sizes stay within.
int64_t measured_l3_bytes(const MachineProbeOptions& o, const ProbeBuffers& buffers, const MachineLimits& m) {
  const int64_t limit = m.l3_bytes / 2;
  constexpr int kMaxSizes = 24;
  int64_t sizes[kMaxSizes];
  int count = 0;
  for (int64_t s = 4 * m.l2_bytes; s <= limit && count < kMaxSizes; s *= 2) sizes[count++] = round_to_kib(s);
  if (count < 2) return m.l3_bytes;  // too small an L3 for a knee among the sizes
  SHAMN_CHECK(sizes[count - 1] <= buffers.first_bytes(), "machine limits: L3 sweep to ", sizes[count - 1],
              " bytes from a ", buffers.first_bytes(), "-byte buffer");
  double rates[kMaxSizes];
  for (int i = 0; i < count; ++i)
    rates[i] = median_rate(1, o.repeats, o.probe_seconds, read_work(buffers, sizes[i]));
  const int64_t knee = cache_knee_bytes(sizes, rates, count, m.read_bytes[kDram].one);
  return knee > 0 ? knee : m.l3_bytes;  // every size is under the reported L3
}

}  // namespace

MachineLimits measure_machine_limits(const MachineProbeOptions& o) {
  SHAMN_INPUT_CHECK(o.threads >= 1, "machine limits: threads must be at least 1, got ", o.threads);
  SHAMN_INPUT_CHECK(o.repeats >= 1, "machine limits: repeats must be at least 1, got ", o.repeats);
  SHAMN_INPUT_CHECK(o.probe_seconds > 0, "machine limits: probe time must be positive");
  MachineLimits m;
  m.kernel = kernel_level_name(kernel_level());
  m.threads = o.threads;
  m.repeats = o.repeats;
  m.l2_bytes = cache_bytes(2);
  m.l3_bytes = cache_bytes(3);
  if (m.l2_bytes <= 0 || m.l3_bytes <= 0) {
    m.cache_sizes_assumed = true;
    m.l2_bytes = int64_t{1} << 20;
    m.l3_bytes = int64_t{32} << 20;
  }
  m.l3_reported_bytes = m.l3_bytes;

  const auto& k = kernels();
  m.f32_flops = one_and_all(o, [&](int, int64_t rounds) {
    double flops = 0;
    g_sink.store(k.fma_loop(rounds * 64, 1.0f, &flops), std::memory_order_relaxed);
    return flops;
  });
  m.bf16_available = bf16_dot_supported();
  if (m.bf16_available)
    m.bf16_flops = one_and_all(o, [&](int, int64_t rounds) {
      double flops = 0;
      g_sink.store(bf16_dot_loop(rounds * 64, &flops), std::memory_order_relaxed);
      return flops;
    });

  // Half a level's capacity stays in it; the L3 buffers of all threads share
  // half the L3 (but each is at least twice an L2, so it is not an L2 read);
  // DRAM reads four times the L3, or 1 GiB if less but never under twice the L3
  // (a stream through twice a cache's capacity finds little of it there), so a
  // VM that reports its host's 512 MiB L3 is not made to touch 2 GiB.
  const int64_t threads = o.threads;
  const int64_t dram_bytes = std::max(2 * m.l3_bytes, std::min(4 * m.l3_bytes, int64_t{1} << 30));
  m.read_buffer_bytes[kL2] = round_to_kib(m.l2_bytes / 2);
  m.read_buffer_bytes[kDram] = round_to_kib(std::max(dram_bytes / threads, 4 * m.l2_bytes));
  const int64_t dram_one_bytes = std::max(round_to_kib(dram_bytes), m.read_buffer_bytes[kDram]);
  const ProbeBuffers buffers(o.threads, std::max(m.read_buffer_bytes[kL2], m.read_buffer_bytes[kDram]),
                             dram_one_bytes);
  // One core's DRAM probes read all of thread 0's buffer: the per-thread
  // buffers shrink as threads grow, and one core reading 1/16 of the DRAM probe
  // can find it in a large L3.
  auto probe = [&](int level, int64_t one_bytes) {
    m.one_core_buffer_bytes[level] = one_bytes;
    m.read_bytes[level] = read_rate(o, buffers, m.read_buffer_bytes[level], one_bytes);
    m.update_bytes[level] = update_rate(o, buffers, m.read_buffer_bytes[level], one_bytes);
  };
  probe(kL2, m.read_buffer_bytes[kL2]);
  probe(kDram, dram_one_bytes);
  m.l3_bytes = measured_l3_bytes(o, buffers, m);
  m.read_buffer_bytes[kL3] = round_to_kib(std::max(m.l3_bytes / (2 * threads), 2 * m.l2_bytes));
  probe(kL3, m.read_buffer_bytes[kL3]);
  return m;
}

int64_t cache_knee_bytes(const int64_t* sizes, const double* rates, int count, double dram_rate) {
  const double fast = 2 * dram_rate, near_dram = 1.5 * dram_rate;
  for (int i = 1; i < count; ++i) {
    if (rates[i] >= fast || rates[i - 1] < fast) continue;
    // A fall from fast: the knee if no later size is fast again and the reads
    // come down near DRAM's rate (a cache that is only a little faster than
    // DRAM, read near the threshold, does not make one).
    bool stays_slow = true, reaches_dram = false;
    for (int j = i; j < count; ++j) {
      stays_slow = stays_slow && rates[j] < fast;
      reaches_dram = reaches_dram || rates[j] <= near_dram;
    }
    if (stays_slow) return reaches_dram ? sizes[i - 1] : 0;
  }
  return 0;
}

RooflineLimits roofline_limits(const MachineLimits& m) {
  RooflineLimits r;
  r.flops_per_s = m.f32_flops.all;
  for (int level = 0; level < kMemoryLevels; ++level)
    r.bytes_per_s[level] = std::max(m.read_bytes[level].all, m.update_bytes[level].all);
  r.capacity_bytes[0] = static_cast<double>(m.l2_bytes) * m.threads;
  r.capacity_bytes[1] = static_cast<double>(m.l3_bytes);
  return r;
}

}  // namespace shamn
