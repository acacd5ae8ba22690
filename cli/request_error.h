#pragma once
// What `shamn serve` answers a body it cannot take with: HTTP 400 and
// OpenAI's error object.
#include <stdexcept>
#include <string>

namespace shamn::cli {

// A body the server answers with HTTP 400; the message names the field.
class RequestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// {"error": {"message": ..., "type": ...}}
std::string error_json(const std::string& message, const std::string& type);

}  // namespace shamn::cli
