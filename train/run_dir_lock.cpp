#include "train/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

#include "core/check.h"

namespace shamn {

std::string RunDirLock::lock_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / ".train.lock").string();
}

RunDirLock::RunDirLock(const std::string& run_dir) {
  const std::string path = lock_file(run_dir);
  // O_CLOEXEC: the children a run starts (gnuplot) must not keep the lock.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SHAMN_INPUT_CHECK(fd_ >= 0, "cannot create '", path, "' to lock the run directory");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw InputError("another shamn train is running in '" + run_dir + "' (it holds " + path +
                     "): wait for it to end, or stop it with Ctrl-C, before starting or resuming this run");
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace shamn
