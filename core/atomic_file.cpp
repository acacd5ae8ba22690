#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace shamn {

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  const std::filesystem::path target(path);
  std::string name = ".";  // hidden, so listings show only finished files
  name += target.filename().string();
  name += ".tmp." + std::to_string(::getpid());
  temp_path_ = (target.parent_path() / name).string();
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SHAMN_INPUT_CHECK(fd_ >= 0, "cannot create '", temp_path_, "' to write '", path, "': ",
                    std::strerror(errno), " (does the directory exist and is it writable?)");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  SHAMN_CHECK(fd_ >= 0, "AtomicFile::write after commit() for '", path_, "'");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    SHAMN_INPUT_CHECK(n > 0, "writing '", path_, "' failed: ", std::strerror(errno),
                      " (disk full?)");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  SHAMN_CHECK(!committed_ && fd_ >= 0, "AtomicFile::commit called twice for '", path_, "'");
  const bool synced = ::fsync(fd_) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  SHAMN_INPUT_CHECK(synced && closed, "writing '", path_, "' failed: ",
                    std::strerror(synced ? errno : sync_errno), " (disk full?)");
  SHAMN_INPUT_CHECK(std::rename(temp_path_.c_str(), path_.c_str()) == 0,
                    "cannot move the finished file into place at '", path_, "': ",
                    std::strerror(errno));
  committed_ = true;
  // The file is complete under its name now; a failed directory fsync only means the
  // rename might not survive a power cut, not worth failing a finished write for.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace shamn
