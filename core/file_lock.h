#pragma once
// An exclusive flock on a file, held while the object lives and released by
// the kernel however the process ends (a `kill -9` frees it).
#include <string>

namespace shamn {

class FileLock {
 public:
  // Whether processes this one starts keep the lock after it ends: a sweep's
  // trainers do (a rerun must wait for orphans), a run's gnuplot does not.
  enum class Children { kRelease, kInherit };

  // Creates `path` if needed; throws InputError naming it if it cannot be
  // opened, and `held_message` if another open file description holds it.
  FileLock(const std::string& path, Children children, const std::string& held_message);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace shamn
