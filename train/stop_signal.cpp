#include "train/stop_signal.h"

#include <unistd.h>

#include <signal.h>
#include <atomic>

namespace shamn {

namespace {
std::atomic<int> g_signal{0};
struct sigaction g_previous_int {
}, g_previous_term{};

void on_signal(int sig) {
  // Only async-signal-safe calls here: an atomic store and write().
  g_signal.store(sig);
  static const char message[] =
      "\nshamn: stopping after this step and writing a checkpoint (signal again to kill)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, message, sizeof(message) - 1);
}
}  // namespace

StopSignal::StopSignal() {
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a signal must not make a checkpoint write fail with EINTR;
  // SA_RESETHAND: the second signal gets the default action.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

StopSignal::~StopSignal() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool StopSignal::requested() const { return g_signal.load() != 0; }
int StopSignal::signal_number() const { return g_signal.load(); }
void StopSignal::request(int signal_number) { g_signal.store(signal_number); }

}  // namespace shamn
