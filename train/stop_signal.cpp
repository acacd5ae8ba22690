#include "train/stop_signal.h"

#include <unistd.h>

#include <signal.h>
#include <atomic>
#include <cstddef>

namespace shamn {

namespace {
constexpr const char kTrainingNotice[] =
    "\nshamn: stopping after this step and writing a checkpoint (signal again to kill)\n";
std::atomic<int> g_signal{0};
std::atomic<const char*> g_notice{kTrainingNotice};
std::atomic<size_t> g_notice_length{sizeof(kTrainingNotice) - 1};
struct sigaction g_previous_int {
}, g_previous_term{};

void on_signal(int sig) {
  // Only async-signal-safe calls here: an atomic store and write().
  g_signal.store(sig);
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, g_notice.load(), g_notice_length.load());
}
}  // namespace

StopSignal::StopSignal(std::string_view notice) {
  g_signal.store(0);
  g_notice.store(notice.empty() ? kTrainingNotice : notice.data());
  g_notice_length.store(notice.empty() ? sizeof(kTrainingNotice) - 1 : notice.size());
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
