#pragma once
// Checks for integer flags that say what they want ("must be a whole number
// from 1 to ...") where CLI11's own number checks say "Value 0 not in range
// 0.000000 to 1.79769e+308", and let a negative seed wrap to 2^64 - 1.
#include <cstdint>
#include <limits>

#include <CLI/CLI.hpp>

namespace shamn::cli {

// A whole number (digits, an optional leading '-') in [min, max].
CLI::Validator whole_number(int64_t min, int64_t max = std::numeric_limits<int64_t>::max());

// A seed: a whole number from 0 to 2^63 - 1, the range train.seed and serve's
// requests take.
inline CLI::Validator seed_number() { return whole_number(0); }

}  // namespace shamn::cli
