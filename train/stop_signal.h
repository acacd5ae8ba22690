#pragma once
// SIGINT / SIGTERM / SIGHUP (and SIGUSR1 / SIGUSR2, which mpirun forwards to every
// rank without killing them after) as a request to stop: the trainer finishes its
// step, writes a checkpoint and exits cleanly. A second signal (not SIGHUP, which
// a closed terminal sends twice) while stopping ends
// the process by that signal's default action once the temporary files being
// written are removed (core/temp_file_cleanup.h); checkpoints are written
// atomically, so the last complete one stays.
#include <string_view>

namespace shamn {

class StopSignal {
 public:
  // Installs the handlers; `notice` (static text) is what a signal prints on
  // stderr, by default the trainer's "stopping after this step ...".
  explicit StopSignal(std::string_view notice = {});
  ~StopSignal();  // restores the previous ones
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  bool requested() const;
  int signal_number() const;               // the signal that asked, 0 if none
  static void request(int signal_number);  // what the handler does (tests use it directly)
};

}  // namespace shamn
