#include "cli/request_error.h"

#include <nlohmann/json.hpp>

#include "cli/json_text.h"

namespace shamn::cli {

std::string error_json(const std::string& message, const std::string& type) {
  return json_text(nlohmann::json{{"error", {{"message", message}, {"type", type}}}});
}

}  // namespace shamn::cli
