#include "core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace shamn {

namespace {

class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string read_whole_file(const std::string& path, const std::string& what, PipePolicy pipes) {
  // O_NONBLOCK only so that opening a FIFO returns; a regular file ignores it.
  Descriptor probe(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  SHAMN_INPUT_CHECK(probe.get() >= 0, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st {};
  SHAMN_INPUT_CHECK(::fstat(probe.get(), &st) == 0, "cannot stat ", what, " '", path,
                    "': ", std::strerror(errno));
  SHAMN_INPUT_CHECK(!S_ISDIR(st.st_mode), what, " '", path, "' is a directory, not a file");
  const bool pipe = S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode);
  SHAMN_INPUT_CHECK(S_ISREG(st.st_mode) || (pipe && pipes == PipePolicy::allow), what, " '", path,
                    "' is not a regular file");
  // A pipe is read blocking, from a descriptor of its own, so the reader waits for its writer.
  Descriptor reopened(S_ISREG(st.st_mode) ? -1 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const int fd = S_ISREG(st.st_mode) ? probe.get() : reopened.get();
  SHAMN_INPUT_CHECK(fd >= 0, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  std::string bytes;
  if (S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    SHAMN_INPUT_CHECK(n >= 0, "reading ", what, " '", path, "' failed at byte ", bytes.size(), ": ",
                      std::strerror(errno));
    if (n == 0) break;
    bytes.append(chunk, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace shamn
