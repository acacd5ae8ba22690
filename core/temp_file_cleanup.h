#pragma once
// Temporary files this process is writing, removed if a stop signal (SIGINT,
// SIGTERM, SIGHUP) ends it: a Ctrl-C during `shamn export` or a checkpoint
// write leaves no ".<name>.tmp.<pid>" behind, where before the next writer of
// that name was the first to remove it. SIGKILL and a power cut still leave
// one; the writers' orphan sweep (core/atomic_file.h) remains for those.
#include <signal.h>

#include <string>

namespace shamn {

// Registers `path` for removal for the object's lifetime. Registration can
// fail quietly (more files at once than slots, a path longer than PATH_MAX):
// the file is then left to the orphan sweep, as before.
class TempFileRegistration {
 public:
  TempFileRegistration() = default;
  explicit TempFileRegistration(const std::string& path);
  ~TempFileRegistration();
  TempFileRegistration(const TempFileRegistration&) = delete;
  TempFileRegistration& operator=(const TempFileRegistration&) = delete;

 private:
  int slot_ = -1;
};

// The most files registered at once; more are left to the orphan sweep.
constexpr int kTempFileSlots = 32;

// A child process that writes a registered file (gnuplot drawing a picture):
// the handlers kill it (SIGKILL, and reap it) before they unlink, so it cannot
// create the file again after they are gone. Quietly unregistered past the slots.
class ChildRegistration {
 public:
  explicit ChildRegistration(int pid);
  ~ChildRegistration();
  ChildRegistration(const ChildRegistration&) = delete;
  ChildRegistration& operator=(const ChildRegistration&) = delete;

 private:
  int slot_ = -1;
};

// While one lives, a stop signal that reaches the handler of
// remove_temp_files_on_stop_signals waits, whichever thread it lands on, and
// ends the process when the last one ends: for a writer replacing files that
// belong together (a token pair), whose interruption between the renames would
// leave a broken set. It also blocks the signals in the calling thread.
class StopSignalsDeferred {
 public:
  StopSignalsDeferred();
  ~StopSignalsDeferred();
  StopSignalsDeferred(const StopSignalsDeferred&) = delete;
  StopSignalsDeferred& operator=(const StopSignalsDeferred&) = delete;

 private:
  sigset_t previous_mask_;
};

// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the registered
// files and then end the process by the same signal (its exit status as
// without them). A signal the process was started with ignored stays ignored.
// For commands that otherwise take the default actions; the CLI calls it at start.
void remove_temp_files_on_stop_signals();

// Async-signal-safe, for other handlers: kills the registered children, then
// unlinks the registered files of this process (not those of a parent whose
// registry a forked child inherited).
void remove_registered_temp_files();

// Async-signal-safe: remove_registered_temp_files(), then dies by `sig` with its
// default action, for a handler whose second signal means "stop now".
[[noreturn]] void remove_temp_files_and_die(int sig);

}  // namespace shamn
