#include "core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/check.h"

namespace shamn {

FileLock::FileLock(const std::string& path, Children children, const std::string& held_message) {
  const int cloexec = children == Children::kRelease ? O_CLOEXEC : 0;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | cloexec, 0644);
  SHAMN_INPUT_CHECK(fd_ >= 0, "cannot create '", path, "' to take a lock on it");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(held_message);
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace shamn
