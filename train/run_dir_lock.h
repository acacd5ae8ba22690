#pragma once
// One training process per run directory: two (a scheduler's requeue while the
// first still runs, a second `--resume` typed by hand) would write and prune
// the same checkpoint names, and each start removes the temporary files it
// finds, the live writer's included.
#include <string>

#include "core/file_lock.h"

namespace shamn {

// RUN_DIR/.train.lock, held while the object lives; the children a run starts
// (gnuplot) do not keep it.
class RunDirLock {
 public:
  // Throws InputError naming the directory if another process holds it.
  explicit RunDirLock(const std::string& run_dir);

  static std::string lock_file(const std::string& run_dir);

 private:
  FileLock lock_;
};

}  // namespace shamn
