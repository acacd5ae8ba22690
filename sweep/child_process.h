#pragma once
// Runs a command as a child process in its own process group, so a Ctrl-C on
// the terminal reaches only the sweep, which forwards exactly one SIGINT to each
// child (a second one would kill a trainer before it checkpoints).
#include <cstdint>
#include <string>
#include <vector>

namespace shamn {

struct ChildResult {
  int exit_status = -1;        // the exit code, or -1 when a signal ended it
  int signal = 0;              // the signal that ended it, 0 if it exited
  int64_t peak_rss_bytes = 0;  // the child's maximum resident set (wait4)
  double wall_s = 0;
};

// Runs argv[0] with argv; stdout goes to `stdout_path` (truncated, unless it is
// the log) and stderr is appended to `log_path` ("" = the sweep's own). Blocks
// until it ends.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& stdout_path,
                      const std::string& log_path);

// Installs SIGINT/SIGTERM handlers for the lifetime of the object: the first
// signal forwards SIGINT to every running child and sets stop_requested(); a
// second one kills the children and exits at once.
class ChildStopGuard {
 public:
  ChildStopGuard();
  ~ChildStopGuard();
  ChildStopGuard(const ChildStopGuard&) = delete;
  ChildStopGuard& operator=(const ChildStopGuard&) = delete;
};
bool stop_requested();

// This executable, to run its own subcommands in children.
std::string self_executable();

}  // namespace shamn
