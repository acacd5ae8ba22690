#include "core/temp_file_cleanup.h"

#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iterator>

namespace shamn {

namespace {

enum SlotState : int { kFree, kFilling, kReady };

struct Slot {
  std::atomic<int> state{kFree};
  pid_t owner = 0;
  char path[PATH_MAX];
};

// A handful is in flight at once (prepare's pair, a checkpoint, a plot's
// three files); static arrays keep the handler free of allocation.
Slot g_slots[kTempFileSlots];
std::atomic<pid_t> g_children[kTempFileSlots];  // 0: a free slot
std::atomic<pid_t> g_child_owners[kTempFileSlots];

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_deferrals{0};
std::atomic<int> g_deferred_signal{0};

void on_stop_signal(int sig) {
  if (g_deferrals.load() > 0) {
    g_deferred_signal.store(sig);
    // The last deferral may have ended between the check and the store: then
    // whichever of it and this takes the signal first ends the process.
    if (g_deferrals.load() > 0 || g_deferred_signal.exchange(0) == 0) return;
  }
  remove_temp_files_and_die(sig);
}

}  // namespace

TempFileRegistration::TempFileRegistration(const std::string& path) {
  if (path.size() >= PATH_MAX) return;
  for (int i = 0; i < kTempFileSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].owner = ::getpid();
    g_slots[i].state.store(kReady, std::memory_order_release);
    slot_ = i;
    return;
  }
}

TempFileRegistration::~TempFileRegistration() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree, std::memory_order_release);
}

ChildRegistration::ChildRegistration(int pid) {
  for (int i = 0; i < kTempFileSlots; ++i) {
    pid_t expected = 0;
    if (g_children[i].compare_exchange_strong(expected, pid)) {
      g_child_owners[i].store(::getpid());
      slot_ = i;
      return;
    }
  }
}

ChildRegistration::~ChildRegistration() {
  if (slot_ < 0) return;
  g_child_owners[slot_].store(0);
  g_children[slot_].store(0);
}

StopSignalsDeferred::StopSignalsDeferred() {
  ++g_deferrals;
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : kStopSignals) sigaddset(&stops, sig);
  ::pthread_sigmask(SIG_BLOCK, &stops, &previous_mask_);
}

StopSignalsDeferred::~StopSignalsDeferred() {
  // A signal pending for this thread reaches the handler as the mask lifts (and
  // ends the process there once no deferral is left); one another thread took waits in g_deferred_signal.
  const bool last = --g_deferrals == 0;
  ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  if (!last) return;
  if (const int sig = g_deferred_signal.exchange(0); sig != 0) remove_temp_files_and_die(sig);
}

void remove_registered_temp_files() {
  const pid_t self = ::getpid();
  for (int i = 0; i < kTempFileSlots; ++i) {
    const pid_t pid = g_children[i].load();
    if (pid > 0 && g_child_owners[i].load() == self && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
  }
  // A slot freed and refilled by another thread while this reads it could give a
  // torn path; unlinking that fails (ENOENT) short of a one-in-never collision.
  for (Slot& slot : g_slots)
    if (slot.state.load(std::memory_order_acquire) == kReady && slot.owner == self) ::unlink(slot.path);
}

void remove_temp_files_and_die(int sig) {
  remove_registered_temp_files();
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(sig, &action, nullptr);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, sig);
  ::sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // only if the default action did not end the process
}

void remove_temp_files_on_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a deferred signal returns: other threads' calls go on
  for (int sig : kStopSignals) {
    struct sigaction previous {};
    ::sigaction(sig, nullptr, &previous);
    if (previous.sa_handler != SIG_IGN) ::sigaction(sig, &action, nullptr);
  }
}

}  // namespace shamn
