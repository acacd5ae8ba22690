// shamn machine's probes and their JSON: every figure measured is positive (no
// timing thresholds), the JSON reads back to the same figures, and a broken file
// is refused naming what is wrong.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/machine_limits.h"
#include "core/machine_limits_json.h"
#include "core/machine_probe_bf16.h"

namespace shamn {

namespace {
MachineLimits quick_limits(int threads) {
  MachineProbeOptions o;
  o.threads = threads;
  o.repeats = 1;
  o.probe_seconds = 0.002;
  return measure_machine_limits(o);
}
}  // namespace

TEST_CASE("machine limits: every probe gives a positive figure", "[core][machine]") {
  const MachineLimits m = quick_limits(2);
  CHECK(m.threads == 2);
  CHECK(m.l2_bytes > 0);
  CHECK(m.l3_bytes > 0);
  // The L3 the probes take: the reported one, or a smaller size the reads
  // measured, at least the sweep's first (4 L2s).
  CHECK(m.l3_bytes <= m.l3_reported_bytes);
  CHECK((m.l3_bytes == m.l3_reported_bytes || m.l3_bytes >= (4 * m.l2_bytes >> 10 << 10)));
  CHECK(m.f32_flops.one > 0);
  CHECK(m.f32_flops.all > 0);
  CHECK(m.bf16_available == bf16_dot_supported());
  if (m.bf16_available) {
    CHECK(m.bf16_flops.one > 0);
    CHECK(m.bf16_flops.all > 0);
  } else {
    CHECK(m.bf16_flops.one == 0);
  }
  for (int level = 0; level < kMemoryLevels; ++level) {
    INFO(memory_level_name(static_cast<MemoryLevel>(level)));
    CHECK(m.read_buffer_bytes[level] > 0);
    CHECK(m.read_bytes[level].one > 0);
    CHECK(m.read_bytes[level].all > 0);
    CHECK(m.update_bytes[level].one > 0);
    CHECK(m.update_bytes[level].all > 0);
  }
  // The L3 buffers share half the measured L3 (each at least two L2s), so a
  // VM's reported host L3 does not make them DRAM reads.
  const int64_t l3_share = std::max(m.l3_bytes / (2 * m.threads), 2 * m.l2_bytes);
  CHECK(m.read_buffer_bytes[1] == std::max<int64_t>(1, l3_share >> 10) << 10);
  // Buffers grow level by level: an L3 read is never an L2 one.
  CHECK(m.read_buffer_bytes[1] > m.read_buffer_bytes[0]);
  CHECK(m.read_buffer_bytes[2] > m.read_buffer_bytes[1]);
  // The DRAM buffers together: at least twice the L3 (a stream through them
  // finds little of it in the cache), at most 1 GiB or twice the L3, whichever
  // is more (a VM that reports its host's L3 is not made to touch gigabytes),
  // or four L2s a thread where those are larger.
  // (Sized from the reported L3: the sweep that may find a smaller one reads them.)
  const int64_t dram_total = m.read_buffer_bytes[2] * m.threads, l3 = m.l3_reported_bytes;
  CHECK(dram_total >= 2 * l3 - 1024 * m.threads);  // each buffer rounded to whole KiB
  CHECK(dram_total <= std::max<int64_t>({int64_t{1} << 30, 2 * l3, 4 * m.l2_bytes * m.threads}));
  // One core's DRAM probes read what all threads read between them (a share
  // could sit in a large L3 at many threads); the caches' read a thread's share.
  CHECK(m.one_core_buffer_bytes[0] == m.read_buffer_bytes[0]);
  CHECK(m.one_core_buffer_bytes[1] == m.read_buffer_bytes[1]);
  // (At least twice the reported L3; a thread's buffer where four L2s are more.)
  CHECK(m.one_core_buffer_bytes[2] >= m.read_buffer_bytes[2]);
  CHECK(m.one_core_buffer_bytes[2] >= 2 * l3 - 1024);
  if (m.one_core_buffer_bytes[2] != m.read_buffer_bytes[2])
    CHECK(format_machine_limits(m).find("one core's DRAM-sized probes read " +
                                        std::to_string(m.one_core_buffer_bytes[2] >> 10) + " KiB") !=
          std::string::npos);

  const RooflineLimits r = roofline_limits(m);
  CHECK(r.valid());
  CHECK(r.flops_per_s == m.f32_flops.all);
  for (int level = 0; level < kMemoryLevels; ++level)
    CHECK(r.bytes_per_s[level] == std::max(m.read_bytes[level].all, m.update_bytes[level].all));
  CHECK(r.capacity_bytes[0] == static_cast<double>(2 * m.l2_bytes));
  CHECK(r.capacity_bytes[1] == static_cast<double>(m.l3_bytes));
}

TEST_CASE("machine limits: the JSON reads back to the same figures", "[core][machine]") {
  const MachineLimits m = quick_limits(1);
  const nlohmann::json j = nlohmann::json::parse(machine_limits_json(m).dump());
  const MachineLimits back = machine_limits_from_json(j, "test.json");
  CHECK(back.kernel == m.kernel);
  CHECK(back.threads == 1);
  CHECK(back.l2_bytes == m.l2_bytes);
  CHECK(back.l3_bytes == m.l3_bytes);
  CHECK(back.l3_reported_bytes == m.l3_reported_bytes);
  CHECK(back.f32_flops.all == Approx(m.f32_flops.all));
  CHECK(back.bf16_available == m.bf16_available);
  for (int level = 0; level < kMemoryLevels; ++level) {
    CHECK(back.read_bytes[level].one == Approx(m.read_bytes[level].one));
    CHECK(back.read_buffer_bytes[level] == m.read_buffer_bytes[level]);
    CHECK(back.one_core_buffer_bytes[level] == m.one_core_buffer_bytes[level]);
    CHECK(back.update_bytes[level].all == Approx(m.update_bytes[level].all));
  }
  CHECK(format_machine_limits(m).find("f32 FMA") != std::string::npos);
}

TEST_CASE("machine limits: the text says when the L3 taken is not the OS's", "[core][machine]") {
  MachineLimits m = quick_limits(1);
  m.l3_reported_bytes = int64_t{512} << 20;
  m.l3_bytes = int64_t{16} << 20;
  m.cache_sizes_assumed = false;
  CHECK_THAT(format_machine_limits(m),
             Catch::Contains("L3 16384 KiB as one core's reads find it; the OS reports 524288 KiB)"));
  m.cache_sizes_assumed = true;
  m.l3_reported_bytes = int64_t{32} << 20;
  CHECK_THAT(
      format_machine_limits(m),
      Catch::Contains("L3 16384 KiB as one core's reads find it; the OS said nothing, assumed 32768 KiB)"));
  m.l3_bytes = m.l3_reported_bytes;
  CHECK_THAT(format_machine_limits(m), Catch::Contains("L3 32768 KiB, assumed: the OS said nothing)"));
  m.cache_sizes_assumed = false;
  CHECK_THAT(format_machine_limits(m), Catch::Contains("L3 32768 KiB):"));
}

TEST_CASE("machine limits: a file from before the L3 sweep reads with the reported L3", "[core][machine]") {
  nlohmann::json j = nlohmann::json::parse(machine_limits_json(quick_limits(1)).dump());
  j["cache"].erase("l3_reported_bytes");
  j["cache"]["l3_bytes"] = 12345678;
  const MachineLimits m = machine_limits_from_json(j, "old.json");
  CHECK(m.l3_bytes == 12345678);
  CHECK(m.l3_reported_bytes == 12345678);
  j["cache"]["l3_reported_bytes"] = 0;
  CHECK_THROWS_WITH(machine_limits_from_json(j, "m.json"),
                    Catch::Contains("\"l3_reported_bytes\" must be a positive number"));
  j["cache"]["l3_reported_bytes"] = 1000;  // less than the L3 the probes took
  CHECK_THROWS_WITH(
      machine_limits_from_json(j, "m.json"),
      Catch::Contains("m.json cache: \"l3_bytes\" 12345678 is more than \"l3_reported_bytes\" 1000"));
}

TEST_CASE("machine limits: a file without one core's DRAM buffer size reads it as a thread's",
          "[core][machine]") {
  nlohmann::json j = nlohmann::json::parse(machine_limits_json(quick_limits(2)).dump());
  REQUIRE(j["read_gbs"]["dram"].contains("buffer_bytes_one_core"));
  CHECK(machine_limits_from_json(j, "new.json").one_core_buffer_bytes[2] >
        machine_limits_from_json(j, "new.json").read_buffer_bytes[2]);
  j["read_gbs"]["dram"].erase("buffer_bytes_one_core");
  const MachineLimits old = machine_limits_from_json(j, "old.json");
  CHECK(old.one_core_buffer_bytes[2] == old.read_buffer_bytes[2]);
}

TEST_CASE("cache knee: the largest size read twice as fast as DRAM, where reads then stay slower",
          "[core][machine]") {
  constexpr int64_t MiB = int64_t{1} << 20;
  const int64_t sizes[] = {4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB, 128 * MiB, 256 * MiB};
  // One core of a 2-core Zen 5 VM that reports its host's 508 MiB L3 (GB/s; DRAM 30).
  const double vm[] = {86, 96, 75, 44, 24, 27, 28};
  CHECK(cache_knee_bytes(sizes, vm, 7, 30) == 16 * MiB);
  // A dip and back (noise) is not the knee; the last fall that stays is.
  const double dip[] = {90, 40, 90, 85, 30, 28, 29};
  CHECK(cache_knee_bytes(sizes, dip, 7, 30) == 32 * MiB);
  // A knee at the first size; exactly twice DRAM counts as fast.
  const double first[] = {90, 31, 30, 29, 30, 28, 29};
  CHECK(cache_knee_bytes(sizes, first, 7, 30) == 4 * MiB);
  const double edge[] = {90, 60, 30, 29, 30, 28, 29};
  CHECK(cache_knee_bytes(sizes, edge, 7, 30) == 8 * MiB);
  // A fall below twice DRAM that never comes near DRAM (a cache only a little
  // faster, read near the threshold) is no knee.
  const double shallow[] = {65, 62, 58, 55, 52, 50, 46};
  CHECK(cache_knee_bytes(sizes, shallow, 7, 30) == 0);
  // Every size fast (the sweep ended inside the cache), every size slow (no
  // cache faster than DRAM), too few sizes: no knee.
  const double fast[] = {90, 90, 88, 85, 80, 75, 70};
  CHECK(cache_knee_bytes(sizes, fast, 7, 30) == 0);
  const double slow[] = {35, 33, 31, 30, 30, 29, 30};
  CHECK(cache_knee_bytes(sizes, slow, 7, 30) == 0);
  CHECK(cache_knee_bytes(sizes, vm, 1, 30) == 0);
  CHECK(cache_knee_bytes(sizes, vm, 0, 30) == 0);
}

TEST_CASE("machine limits: a broken file is refused with the key named", "[core][machine]") {
  const nlohmann::json good = nlohmann::json::parse(machine_limits_json(quick_limits(1)).dump());
  CHECK_THROWS_WITH(machine_limits_from_json(nlohmann::json::array(), "m.json"),
                    Catch::Contains("m.json: not a JSON object"));
  nlohmann::json missing = good;
  missing.erase("read_gbs");
  CHECK_THROWS_WITH(machine_limits_from_json(missing, "m.json"), Catch::Contains("missing \"read_gbs\""));
  nlohmann::json negative = good;
  negative["f32_fma_gflops"]["all_cores"] = -1.0;
  CHECK_THROWS_WITH(machine_limits_from_json(negative, "m.json"),
                    Catch::Contains("\"all_cores\" must be a positive number"));
  // Counts and sizes are whole numbers in range: 0.5 threads or a 1e30-byte L2
  // would otherwise become 0 or an undefined cast, and the roofline vanish.
  for (const auto& [key, value] : std::vector<std::pair<std::string, double>>{{"threads", 0.5},
                                                                              {"threads", 1e10},
                                                                              {"repeats", 2.5},
                                                                              {"l2_bytes_per_core", 1e30},
                                                                              {"l2_bytes_per_core", 0.5},
                                                                              {"l3_bytes", 1e6 + 0.25}}) {
    INFO(key << " = " << value);
    nlohmann::json bad = good;
    (key == "threads" || key == "repeats" ? bad[key] : bad["cache"][key]) = value;
    CHECK_THROWS_WITH(machine_limits_from_json(bad, "m.json"),
                      Catch::Contains("\"" + key + "\" must be a whole number from 1 to"));
  }
  nlohmann::json fraction = good;
  fraction["read_gbs"]["l3"]["buffer_bytes_per_thread"] = 1.5;
  CHECK_THROWS_WITH(
      machine_limits_from_json(fraction, "m.json"),
      Catch::Contains("m.json read_gbs.l3: \"buffer_bytes_per_thread\" must be a whole number"));
  nlohmann::json text = good;
  text["read_gbs"]["dram"]["one_core"] = "fast";
  CHECK_THROWS_AS(machine_limits_from_json(text, "m.json"), InputError);
  nlohmann::json no_bf16 = good;
  no_bf16["bf16_dot_gflops"] = "not available";
  CHECK_FALSE(machine_limits_from_json(no_bf16, "m.json").bf16_available);
  CHECK_THROWS_WITH(read_machine_limits("/no/such/machine.json"), Catch::Contains("/no/such/machine.json"));
}

}  // namespace shamn
