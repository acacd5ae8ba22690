#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/check.h"
#include "core/fault.h"

namespace shamn {

namespace fs = std::filesystem;

namespace {

// Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "." + std::string.
std::string temp_prefix(const fs::path& target) {
  std::string prefix = ".";  // hidden: listings show finished files only
  prefix += target.filename().string();
  prefix += ".tmp.";
  return prefix;
}

bool process_gone(const std::string& pid_text) {
  if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) return false;
  const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

std::string temp_path_for(const std::string& path, const std::string& suffix) {
  const fs::path target(path);
  return (target.parent_path() / (temp_prefix(target) + std::to_string(::getpid()) + suffix)).string();
}

int remove_orphaned_temp_files(const std::string& path, const std::string& suffix) {
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = temp_prefix(target);
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 || !name.ends_with(suffix))
      continue;
    if (process_gone(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size())) &&
        fs::remove(entry.path(), ec))
      ++removed;
  }
  return removed;
}

void check_replaceable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  const char* what = S_ISDIR(st.st_mode)                          ? "a directory"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                                                                  : "not a regular file";
  throw InputError(detail::concat("cannot write '", path, "': it is ", what,
                                  ", which shamn does not replace (it writes a new file and renames it "
                                  "into place): give the path of a file"));
}

void check_output_path(const std::string& path) {
  check_replaceable(path);
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  SHAMN_INPUT_CHECK(fs::is_directory(dir, ec), "cannot write '", path, "': the directory '", dir.string(),
                    "' does not exist");
  SHAMN_INPUT_CHECK(::access(dir.c_str(), W_OK) == 0, "cannot write '", path, "': the directory '",
                    dir.string(), "' is not writable (", std::strerror(errno), ")");
}

AtomicFile::AtomicFile(const std::string& path, std::string kind)
    : path_(path), temp_path_(temp_path_for(path)), kind_(std::move(kind)), registration_(temp_path_) {
  check_replaceable(path);
  remove_orphaned_temp_files(path);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SHAMN_INPUT_CHECK(fd_ >= 0, "cannot create '", temp_path_, "' to write '", path,
                    "': ", std::strerror(errno), " (does the directory exist and is it writable?)");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  SHAMN_CHECK(fd_ >= 0, "AtomicFile::write after commit() for '", path_, "'");
  const std::string site = fault::armed() ? kind_ + ".bytes" : std::string();
  const fault::ByteFault fault = fault::bytes(site, written_, bytes);
  const char* p = static_cast<const char*>(data);
  write_all(p, fault.allowed);
  if (fault.strikes) {
    const int err = fault::strike(site);
    SHAMN_INPUT_CHECK(err == 0, "writing '", path_, "' failed after ", written_,
                      " bytes: ", std::strerror(err), " (disk full?)");
    write_all(p + fault.allowed, bytes - fault.allowed);  // after a stall, the rest
  }
}

void AtomicFile::write_all(const char* p, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    SHAMN_INPUT_CHECK(n > 0, "writing '", path_, "' failed: ", std::strerror(errno), " (disk full?)");
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::sync() {
  SHAMN_CHECK(!committed_ && fd_ >= 0, "AtomicFile::sync after sync() or commit() for '", path_, "'");
  int sync_errno = fault::pass(kind_ + ".fsync");
  if (sync_errno == 0 && ::fsync(fd_) != 0) sync_errno = errno;
  const bool closed = ::close(fd_) == 0;
  const int close_errno = errno;
  fd_ = -1;
  SHAMN_INPUT_CHECK(sync_errno == 0 && closed, "writing '", path_,
                    "' failed: ", std::strerror(sync_errno != 0 ? sync_errno : close_errno), " (disk full?)");
  synced_ = true;
}

void AtomicFile::commit() {
  SHAMN_CHECK(!committed_, "AtomicFile::commit called twice for '", path_, "'");
  if (!synced_) sync();
  int rename_errno = fault::pass(kind_ + ".rename");
  if (rename_errno == 0 && std::rename(temp_path_.c_str(), path_.c_str()) != 0) rename_errno = errno;
  SHAMN_INPUT_CHECK(rename_errno == 0, "cannot move the finished file into place at '", path_,
                    "': ", std::strerror(rename_errno));
  committed_ = true;
  // The file is complete under its name now; a failed directory fsync only means the
  // rename might not survive a power cut, not worth failing a finished write for.
  if (fault::pass(kind_ + ".dirsync") != 0) return;
  const std::string dir = fs::path(path_).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& kind) {
  AtomicFile file(path, kind);
  file.write(text.data(), text.size());
  file.commit();
}

void copy_file_atomically(const std::string& from, const std::string& to, const std::string& kind) {
  std::ifstream in(from, std::ios::binary);
  SHAMN_INPUT_CHECK(in.good(), "cannot open '", from, "' to copy it to '", to, "'");
  AtomicFile file(to, kind);
  std::vector<char> chunk(size_t{1} << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (in.gcount() > 0) file.write(chunk.data(), static_cast<size_t>(in.gcount()));
  }
  SHAMN_INPUT_CHECK(!in.bad(), "reading '", from, "' to copy it to '", to, "' failed");
  file.commit();
}

}  // namespace shamn
