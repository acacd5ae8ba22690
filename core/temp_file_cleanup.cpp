#include "core/temp_file_cleanup.h"

#include <limits.h>
#include <signal.h>
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
// three files); the static array keeps the handler free of allocation.
constexpr int kSlots = 32;
Slot g_slots[kSlots];

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

void on_stop_signal(int sig) { remove_temp_files_and_die(sig); }

}  // namespace

TempFileRegistration::TempFileRegistration(const std::string& path) {
  if (path.size() >= PATH_MAX) return;
  for (int i = 0; i < kSlots; ++i) {
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

void remove_registered_temp_files() {
  const pid_t self = ::getpid();
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
  for (int sig : kStopSignals) {
    struct sigaction previous {};
    ::sigaction(sig, nullptr, &previous);
    if (previous.sa_handler != SIG_IGN) ::sigaction(sig, &action, nullptr);
  }
}

}  // namespace shamn
