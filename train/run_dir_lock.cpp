#include "train/run_dir_lock.h"

#include <filesystem>

namespace shamn {

std::string RunDirLock::lock_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / ".train.lock").string();
}

RunDirLock::RunDirLock(const std::string& run_dir)
    : lock_(lock_file(run_dir), FileLock::Children::kRelease,
            "another shamn train is running in '" + run_dir + "' (it holds " + lock_file(run_dir) +
                "): wait for it to end, or stop it with Ctrl-C, before starting or resuming this run") {}

}  // namespace shamn
