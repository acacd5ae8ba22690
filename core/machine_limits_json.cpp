#include "core/machine_limits_json.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace shamn {

namespace {

const char* const kLevelKeys[kMemoryLevels] = {"l2", "l3", "dram"};

nlohmann::ordered_json rate_json(const ProbeRate& r) {
  return {{"one_core", r.one / 1e9}, {"all_cores", r.all / 1e9}};
}

double positive(const nlohmann::json& j, const char* key, const std::string& where) {
  SHAMN_INPUT_CHECK(j.is_object() && j.contains(key), where, ": missing \"", key, "\"");
  const nlohmann::json& v = j.at(key);
  SHAMN_INPUT_CHECK(v.is_number() && v.get<double>() > 0, where, ": \"", key,
                    "\" must be a positive number, got ", v.dump());
  return v.get<double>();
}

// A count or a size in bytes: a whole number in [1, max] (a fraction or 1e30
// would become 0 or an undefined cast, and the roofline would quietly vanish).
int64_t positive_integer(const nlohmann::json& j, const char* key, const std::string& where, int64_t max) {
  const double v = positive(j, key, where);
  SHAMN_INPUT_CHECK(v == std::floor(v) && v <= static_cast<double>(max), where, ": \"", key,
                    "\" must be a whole number from 1 to ", max, ", got ", j.at(key).dump());
  return static_cast<int64_t>(v);
}

constexpr int64_t kMaxCount = 1 << 20;           // threads, repeats
constexpr int64_t kMaxBytes = int64_t{1} << 50;  // cache and buffer sizes

const nlohmann::json& member(const nlohmann::json& j, const char* key, const std::string& where) {
  SHAMN_INPUT_CHECK(j.is_object() && j.contains(key), where, ": missing \"", key, "\"");
  return j.at(key);
}

ProbeRate rate_from(const nlohmann::json& j, const std::string& where) {
  return {1e9 * positive(j, "one_core", where), 1e9 * positive(j, "all_cores", where)};
}

}  // namespace

nlohmann::ordered_json machine_limits_json(const MachineLimits& m) {
  nlohmann::ordered_json reads, updates;
  for (int level = 0; level < kMemoryLevels; ++level) {
    nlohmann::ordered_json r = rate_json(m.read_bytes[level]);
    r["buffer_bytes_per_thread"] = m.read_buffer_bytes[level];
    r["buffer_bytes_one_core"] = m.one_core_buffer_bytes[level];
    reads[kLevelKeys[level]] = r;
    updates[kLevelKeys[level]] = rate_json(m.update_bytes[level]);
  }
  return {{"kernel", m.kernel},
          {"threads", m.threads},
          {"repeats", m.repeats},
          {"cache",
           {{"l2_bytes_per_core", m.l2_bytes},
            {"l3_bytes", m.l3_bytes},
            {"l3_reported_bytes", m.l3_reported_bytes},
            {"assumed", m.cache_sizes_assumed}}},
          {"f32_fma_gflops", rate_json(m.f32_flops)},
          {"bf16_dot_gflops",
           m.bf16_available ? rate_json(m.bf16_flops) : nlohmann::ordered_json("not available")},
          {"read_gbs", reads},
          {"update_gbs", updates}};
}

MachineLimits machine_limits_from_json(const nlohmann::json& j, const std::string& what) {
  SHAMN_INPUT_CHECK(j.is_object(), what, ": not a JSON object (write it with `shamn machine --json`)");
  MachineLimits m;
  const nlohmann::json& kernel = member(j, "kernel", what);
  SHAMN_INPUT_CHECK(kernel.is_string(), what, ": \"kernel\" must be a string");
  m.kernel = kernel.get<std::string>();
  m.threads = static_cast<int>(positive_integer(j, "threads", what, kMaxCount));
  m.repeats = static_cast<int>(positive_integer(j, "repeats", what, kMaxCount));
  const nlohmann::json& cache = member(j, "cache", what);
  m.l2_bytes = positive_integer(cache, "l2_bytes_per_core", what + " cache", kMaxBytes);
  m.l3_bytes = positive_integer(cache, "l3_bytes", what + " cache", kMaxBytes);
  // Files written before stop 56 have no reported size: the probes took the OS's.
  m.l3_reported_bytes = cache.contains("l3_reported_bytes")
                            ? positive_integer(cache, "l3_reported_bytes", what + " cache", kMaxBytes)
                            : m.l3_bytes;
  SHAMN_INPUT_CHECK(m.l3_bytes <= m.l3_reported_bytes, what, " cache: \"l3_bytes\" ", m.l3_bytes,
                    " is more than \"l3_reported_bytes\" ", m.l3_reported_bytes,
                    " (the probes take the reported L3 or less)");
  m.f32_flops = rate_from(member(j, "f32_fma_gflops", what), what + " f32_fma_gflops");
  const nlohmann::json& bf16 = member(j, "bf16_dot_gflops", what);
  m.bf16_available = !bf16.is_string();
  if (m.bf16_available) m.bf16_flops = rate_from(bf16, what + " bf16_dot_gflops");
  const nlohmann::json& reads = member(j, "read_gbs", what);
  for (int level = 0; level < kMemoryLevels; ++level) {
    const std::string where = what + " read_gbs." + kLevelKeys[level];
    const nlohmann::json& r = member(reads, kLevelKeys[level], what + " read_gbs");
    m.read_bytes[level] = rate_from(r, where);
    m.read_buffer_bytes[level] = positive_integer(r, "buffer_bytes_per_thread", where, kMaxBytes);
    // Files written before the key was (stop 58) do not say: taken as a thread's
    // share, though builds from stop 56 on read the whole DRAM probe already
    // (it only changes the note the text prints).
    m.one_core_buffer_bytes[level] = r.contains("buffer_bytes_one_core")
                                         ? positive_integer(r, "buffer_bytes_one_core", where, kMaxBytes)
                                         : m.read_buffer_bytes[level];
    const nlohmann::json& u = member(member(j, "update_gbs", what), kLevelKeys[level], what + " update_gbs");
    m.update_bytes[level] = rate_from(u, what + " update_gbs." + kLevelKeys[level]);
  }
  return m;
}

MachineLimits read_machine_limits(const std::string& path) {
  std::ifstream in(path);
  SHAMN_INPUT_CHECK(in.good(), "cannot read machine limits from ", path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  SHAMN_INPUT_CHECK(!j.is_discarded(), path, ": not valid JSON (write it with `shamn machine --json`)");
  return machine_limits_from_json(j, path);
}

std::string format_machine_limits(const MachineLimits& m) {
  char buf[512];
  std::string out;
  auto line = [&](const char* name, const ProbeRate& r, const char* unit) {
    std::snprintf(buf, sizeof(buf), "  %-30s %10.1f %s one core %10.1f %s %d threads\n", name, r.one / 1e9,
                  unit, r.all / 1e9, unit, m.threads);
    out += buf;
  };
  std::snprintf(buf, sizeof(buf),
                "machine limits (kernel %s, median of %d; L2 %lld KiB per core, L3 %lld KiB",
                m.kernel.c_str(), m.repeats, static_cast<long long>(m.l2_bytes >> 10),
                static_cast<long long>(m.l3_bytes >> 10));
  out += buf;
  if (m.l3_bytes != m.l3_reported_bytes) {
    std::snprintf(buf, sizeof(buf), " as one core's reads find it; %s %lld KiB",
                  m.cache_sizes_assumed ? "the OS said nothing, assumed" : "the OS reports",
                  static_cast<long long>(m.l3_reported_bytes >> 10));
    out += buf;
  } else if (m.cache_sizes_assumed) {
    out += ", assumed: the OS said nothing";
  }
  out += "):\n";
  line("f32 FMA", m.f32_flops, "GFLOP/s");
  if (m.bf16_available)
    line("bf16 dot (vdpbf16ps)", m.bf16_flops, "GFLOP/s");
  else
    out += "  bf16 dot                       not available (no AVX512_BF16)\n";
  const char* names[kMemoryLevels] = {"L2-sized", "L3-sized", "DRAM-sized"};
  for (int level = 0; level < kMemoryLevels; ++level) {
    char name[64];
    std::snprintf(name, sizeof(name), "read, %s (%lld KiB)", names[level],
                  static_cast<long long>(m.read_buffer_bytes[level] >> 10));
    line(name, m.read_bytes[level], "GB/s   ");
    std::snprintf(name, sizeof(name), "update y += x, %s", names[level]);
    line(name, m.update_bytes[level], "GB/s   ");
  }
  // Sizes are a thread's; say where one core's probes read more (DRAM's, at
  // more than one thread).
  for (int level = 0; level < kMemoryLevels; ++level)
    if (m.one_core_buffer_bytes[level] != m.read_buffer_bytes[level]) {
      std::snprintf(buf, sizeof(buf), "  (sizes a thread; one core's %s probes read %lld KiB)\n",
                    names[level], static_cast<long long>(m.one_core_buffer_bytes[level] >> 10));
      out += buf;
    }
  return out;
}

}  // namespace shamn
