#include "core/check.h"

#include <cstring>

namespace shamn::detail {

[[noreturn]] void throw_check_failure(const char* cond, const char* file, int line,
                                      const std::string& message) {
  const char* base = std::strrchr(file, '/');
  std::ostringstream out;
  out << message << " [check `" << cond << "` failed at " << (base ? base + 1 : file) << ":" << line << "]";
  throw Error(out.str());
}

}  // namespace shamn::detail
