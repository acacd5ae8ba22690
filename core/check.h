#pragma once
// Checked errors. Library code never exits or aborts: a failed check throws a
// shamn::Error whose message says what was wrong and, where it helps, what to
// do about it. The CLI catches it, prints it and exits non-zero.
#include <sstream>
#include <stdexcept>
#include <string>

namespace shamn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad user input (config, file, argument): the message names the offending key/file.
class InputError : public Error {
 public:
  using Error::Error;
};

// A config value that is wrong for the model: `key` is the dotted config key
// (e.g. "model.sparse.block") so the loader can add the file and line.
class ConfigError : public InputError {
 public:
  ConfigError(std::string key, const std::string& what) : InputError(what), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
[[noreturn]] void throw_check_failure(const char* cond, const char* file, int line,
                                      const std::string& message);
}  // namespace detail

}  // namespace shamn

// SHAMN_CHECK(cond, parts...): throws shamn::Error with the streamed parts, the
// failed condition and the source location.
#define SHAMN_CHECK(cond, ...)                                                                               \
  do {                                                                                                       \
    if (!(cond)) [[unlikely]]                                                                                \
      ::shamn::detail::throw_check_failure(#cond, __FILE__, __LINE__, ::shamn::detail::concat(__VA_ARGS__)); \
  } while (0)

// SHAMN_CONFIG_CHECK(cond, key, parts...): throws shamn::ConfigError for `key`.
#define SHAMN_CONFIG_CHECK(cond, key, ...)                                   \
  do {                                                                       \
    if (!(cond)) [[unlikely]]                                                \
      throw ::shamn::ConfigError(key, ::shamn::detail::concat(__VA_ARGS__)); \
  } while (0)

// SHAMN_INPUT_CHECK(cond, parts...): the same for bad user input; throws
// shamn::InputError carrying only the message (the user's file/key, not ours).
#define SHAMN_INPUT_CHECK(cond, ...)                                   \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      throw ::shamn::InputError(::shamn::detail::concat(__VA_ARGS__)); \
  } while (0)
