#pragma once
// One training process per run directory: two (a scheduler's requeue while the
// first still runs, a second `--resume` typed by hand) would write and prune
// the same checkpoint names, and each start removes the temporary files it
// finds, the live writer's included.
#include <string>

namespace shamn {

// An exclusive flock on RUN_DIR/.train.lock, held while the object lives (and
// by the kernel until the process ends, however it ends: a `kill -9` frees it).
class RunDirLock {
 public:
  // Throws InputError naming the directory if another process holds it.
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  static std::string lock_file(const std::string& run_dir);

 private:
  int fd_ = -1;
};

}  // namespace shamn
