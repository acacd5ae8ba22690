#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace shamn::cli {

// JSON text of j. Invalid UTF-8 (a path Linux allows, or generated text whose
// token ends inside a character) becomes U+FFFD instead of an exception after
// the command's work is done.
// Json: nlohmann::json or nlohmann::ordered_json.
template <class Json>
std::string json_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace shamn::cli
