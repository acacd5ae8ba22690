#include "sweep/child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "core/check.h"
#include "core/temp_file_cleanup.h"
#include "core/timing.h"
#include "sweep/sweep_spec.h"

extern char** environ;

namespace shamn {

namespace {

constexpr int kSlots = 256;
static_assert(kSlots >= kMaxSweepJobs, "a slot for every child a sweep runs at once");
std::atomic<pid_t> g_children[kSlots];  // running children; 0 = a free slot
std::atomic<int> g_signals{0};
// SIGHUP too: a closed ssh session must stop the children as Ctrl-C does, not leave
// them training as orphans.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_old[std::size(kStopSignals)], g_old_pipe;

void on_signal(int sig) {
  // Only async-signal-safe calls here: kill, unlink and _exit. A closed terminal
  // sends SIGHUP twice (the shell's, then the kernel's): never the second signal.
  if (sig == SIGHUP && g_signals.load() > 0) return;
  const int n = ++g_signals;
  for (auto& slot : g_children) {
    const pid_t pid = slot.load();
    // Its process group (each child leads one): a gnuplot it runs stops with it.
    if (pid > 0 && kill(-pid, n == 1 ? SIGINT : SIGKILL) != 0) kill(pid, n == 1 ? SIGINT : SIGKILL);
  }
  if (n > 1) {
    remove_registered_temp_files();
    _exit(130);
  }
}

int claim_slot(pid_t pid) {
  for (int i = 0; i < kSlots; ++i) {
    pid_t expected = 0;
    if (g_children[i].compare_exchange_strong(expected, pid)) return i;
  }
  return -1;  // more children than slots cannot happen (jobs are capped), but stay safe
}

}  // namespace

bool stop_requested() { return g_signals.load() > 0; }

ChildStopGuard::ChildStopGuard() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], nullptr, &g_old[i]);
    // A signal the parent set to be ignored stays ignored: `nohup shamn sweep`
    // must outlive the ssh session, and a script's background job ignores SIGINT.
    if (g_old[i].sa_handler != SIG_IGN) sigaction(kStopSignals[i], &sa, nullptr);
  }
  // `shamn sweep | head`: once the reader has gone, the sweep's progress lines are lost
  // (EPIPE) but its children still finish and write their results.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &g_old_pipe);
}

ChildStopGuard::~ChildStopGuard() {
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &g_old[i], nullptr);
  sigaction(SIGPIPE, &g_old_pipe, nullptr);
}

std::string self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  SHAMN_CHECK(!ec, "cannot read /proc/self/exe: ", ec.message());
  return p.string();
}

ChildResult run_child(const std::vector<std::string>& argv, const std::string& stdout_path,
                      const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // A log shared by stdout and stderr is appended to, never truncated.
  const int stdout_mode = stdout_path == log_path ? O_APPEND : O_TRUNC;
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | stdout_mode, 0644);
  if (!log_path.empty())
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  // The child starts with default signal actions, not the sweep's handlers (an
  // ignored SIGPIPE would otherwise pass through exec).
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : kStopSignals) sigaddset(&defaults, sig);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);

  const Stopwatch wall;
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  SHAMN_CHECK(rc == 0, "cannot start '", argv[0], "': ", std::strerror(rc));
  const int slot = claim_slot(pid);
  if (stop_requested()) kill(pid, SIGINT);  // the signal came before the slot was visible

  // Waited for without reaping first: the slot is freed while the pid still names
  // this child, so a signal handler never signals a reused pid.
  siginfo_t info{};
  int ready;
  do {
    ready = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);
  } while (ready < 0 && errno == EINTR);
  if (slot >= 0) g_children[slot].store(0);
  int status = 0;
  struct rusage usage {};
  pid_t waited;
  do {
    waited = wait4(pid, &status, 0, &usage);
  } while (waited < 0 && errno == EINTR);
  SHAMN_CHECK(waited == pid, "wait4 failed for '", argv[0], "': ", std::strerror(errno));

  ChildResult r;
  r.wall_s = wall.seconds();
  r.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

}  // namespace shamn
