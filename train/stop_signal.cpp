#include "train/stop_signal.h"

#include <unistd.h>

#include <signal.h>
#include <atomic>
#include <cstddef>
#include <iterator>

#include "core/temp_file_cleanup.h"

namespace shamn {

namespace {
constexpr const char kTrainingNotice[] =
    "\nshamn: stopping after this step and writing a checkpoint (signal again to kill)\n";
std::atomic<int> g_signal{0};
std::atomic<const char*> g_notice{kTrainingNotice};
std::atomic<size_t> g_notice_length{sizeof(kTrainingNotice) - 1};
// SIGUSR1 and SIGUSR2 too: mpirun forwards them to every rank and waits, while on
// Ctrl-C or SIGTERM it sends the ranks SIGTERM and kills them a second later, mid-step.
// SIGHUP: a closed terminal or ssh session stops the run with a checkpoint.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
struct sigaction g_previous[std::size(kStopSignals)];

void on_signal(int sig) {
  // Only async-signal-safe calls here: an atomic exchange, write(), and on the
  // second signal unlink() of the files being written and the default action.
  // A closed terminal sends SIGHUP twice (the shell's, then the kernel's to the
  // foreground group): a hangup never counts as the second signal.
  int first = 0;
  if (!g_signal.compare_exchange_strong(first, sig)) {
    if (sig != SIGHUP) remove_temp_files_and_die(sig);
    return;
  }
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
  // SA_RESTART: a signal must not make a checkpoint write fail with EINTR.
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], nullptr, &g_previous[i]);
    // A signal the parent set to be ignored (SIGINT in a script's background job)
    // stays ignored, as the shell meant.
    if (g_previous[i].sa_handler != SIG_IGN) sigaction(kStopSignals[i], &action, nullptr);
  }
}

StopSignal::~StopSignal() {
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

bool StopSignal::requested() const { return g_signal.load() != 0; }
int StopSignal::signal_number() const { return g_signal.load(); }
void StopSignal::request(int signal_number) { g_signal.store(signal_number); }

}  // namespace shamn
