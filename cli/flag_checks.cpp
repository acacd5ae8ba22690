#include "cli/flag_checks.h"

#include <charconv>
#include <string>

namespace shamn::cli {

CLI::Validator whole_number(int64_t min, int64_t max) {
  const std::string want = max == std::numeric_limits<int64_t>::max()
                               ? "a whole number >= " + std::to_string(min)
                               : "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, want](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        if (text.empty() || ec != std::errc() || at != end || v < min || v > max)
          return "must be " + want + ", got '" + text + "'";
        return std::string();
      },
      "INT");
}

}  // namespace shamn::cli
