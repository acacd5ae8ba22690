#pragma once
// `shamn machine --json` and its reading back (`--profile --machine FILE`), and
// the plain-text report. Rates in the JSON are GFLOP/s and GB/s (1e9); an
// update's bytes count both reads and the write.
#include <string>

#include <nlohmann/json.hpp>

#include "core/machine_limits.h"

namespace shamn {

nlohmann::ordered_json machine_limits_json(const MachineLimits& limits);

// Throws InputError naming `what` (a file name) and the key when a figure is
// missing, not a number, or not positive (bf16 may be "not available").
MachineLimits machine_limits_from_json(const nlohmann::json& json, const std::string& what);

// machine_limits_from_json of a file written by `shamn machine --json`.
MachineLimits read_machine_limits(const std::string& path);

std::string format_machine_limits(const MachineLimits& limits);

}  // namespace shamn
