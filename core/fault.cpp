#include "core/fault.h"

#include <signal.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "core/check.h"

namespace shamn::fault {

namespace {

// HDF5 writes its own bytes: its files count datasets (`.tensor`), the others bytes.
constexpr std::string_view kHdf5Kinds[] = {"checkpoint", "model", "grads"};
constexpr std::string_view kByteKinds[] = {"tokens", "tokenizer", "shq", "result", "text", "metrics", "best"};
constexpr std::string_view kCommitStages[] = {"fsync", "rename", "dirsync"};
constexpr std::string_view kOtherSites[] = {"metrics.append", "best.hardlink",  "best.link",
                                            "train.start",    "train.exchange", "serve.step"};

template <size_t N>
bool one_of(std::string_view s, const std::string_view (&list)[N]) {
  for (std::string_view item : list)
    if (s == item) return true;
  return false;
}

enum class Action { kill, enospc, eio, stall };

struct Fault {
  std::string site;
  uint64_t n = 0;
  Action action = Action::kill;
  bool due = false;   // strikes at the next strike(site)
  bool done = false;  // struck already: a fault strikes once
};

struct State {
  std::mutex mutex;
  std::vector<Fault> faults;
  std::map<std::string, uint64_t, std::less<>> passes;
  std::string error;  // why SHAMN_FAULT could not be parsed, for check_environment()
};

State& state() {
  static State s;
  return s;
}

bool known_site(std::string_view site) {
  if (one_of(site, kOtherSites)) return true;
  const size_t dot = site.find('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view kind = site.substr(0, dot), stage = site.substr(dot + 1);
  const bool hdf5 = one_of(kind, kHdf5Kinds), bytes = one_of(kind, kByteKinds);
  return ((hdf5 || bytes) && one_of(stage, kCommitStages)) || (hdf5 && stage == "tensor") ||
         (bytes && stage == "bytes");
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == sep) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// Throws InputError on a malformed spec.
std::vector<Fault> parse(std::string_view spec) {
  std::vector<Fault> out;
  if (spec.empty()) return out;
  for (std::string_view item : split(spec, ',')) {
    const std::vector<std::string_view> parts = split(item, ':');
    SHAMN_INPUT_CHECK(parts.size() == 2 || parts.size() == 3, "SHAMN_FAULT: '", item,
                      "' is not <site>:<n>[:kill|enospc|eio|stall]");
    Fault f;
    f.site = std::string(parts[0]);
    SHAMN_INPUT_CHECK(known_site(f.site), "SHAMN_FAULT: unknown site '", f.site,
                      "' (core/fault.h lists the sites)");
    const std::string n(parts[1]);
    char* end = nullptr;
    errno = 0;
    f.n = std::strtoull(n.c_str(), &end, 10);
    SHAMN_INPUT_CHECK(
        !n.empty() && std::isdigit(static_cast<unsigned char>(n[0])) && *end == '\0' && errno == 0,
        "SHAMN_FAULT: '", item, "': the count '", n, "' is not a non-negative integer");
    // Passes count from 1; only a byte offset (a .bytes site) can be 0.
    SHAMN_INPUT_CHECK(f.n > 0 || f.site.ends_with(".bytes"), "SHAMN_FAULT: '", item,
                      "': passes count from 1, so a count of 0 would never strike");
    const std::string_view action = parts.size() == 3 ? parts[2] : "kill";
    if (action == "kill")
      f.action = Action::kill;
    else if (action == "enospc")
      f.action = Action::enospc;
    else if (action == "eio")
      f.action = Action::eio;
    else if (action == "stall")
      f.action = Action::stall;
    else
      SHAMN_INPUT_CHECK(false, "SHAMN_FAULT: '", item, "': unknown action '", action,
                        "' (want kill, enospc, eio or stall)");
    out.push_back(std::move(f));
  }
  return out;
}

bool arm_from_environment() {
  const char* spec = std::getenv("SHAMN_FAULT");
  if (spec == nullptr || *spec == '\0') return false;
  try {
    state().faults = parse(spec);
  } catch (const InputError& e) {
    state().error = e.what();
  }
  return !state().faults.empty();
}

int act(Fault& f) {
  f.done = true;
  switch (f.action) {
    case Action::kill:
      ::raise(SIGKILL);
      return 0;
    case Action::enospc:
      return ENOSPC;
    case Action::eio:
      return EIO;
    case Action::stall:
      ::raise(SIGSTOP);
      return 0;
  }
  return 0;
}

}  // namespace

namespace detail {
bool g_armed = arm_from_environment();
}

void check_environment() {
  const std::lock_guard<std::mutex> lock(state().mutex);
  SHAMN_INPUT_CHECK(state().error.empty(), state().error);
}

void set_for_testing(const std::string& spec) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.faults = parse(spec);
  s.passes.clear();
  s.error.clear();
  detail::g_armed = !s.faults.empty();
}

bool due(std::string_view site) {
  if (!armed()) return false;
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.passes.find(site);
  if (it == s.passes.end()) it = s.passes.emplace(std::string(site), 0).first;
  const uint64_t n = ++it->second;
  bool any = false;
  for (Fault& f : s.faults) {
    if (!f.done && f.site == site && f.n == n) {
      f.due = true;
      any = true;
    }
  }
  return any;
}

int strike(std::string_view site) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  for (Fault& f : s.faults)
    if (f.due && !f.done && f.site == site) return act(f);
  return 0;
}

int pass(std::string_view site) { return due(site) ? strike(site) : 0; }

ByteFault bytes(std::string_view site, uint64_t offset, size_t bytes) {
  if (!armed()) return {bytes, false};
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  // The earliest offset this write reaches strikes, whatever the list's order.
  Fault* first = nullptr;
  for (Fault& f : s.faults)
    if (!f.done && f.site == site && f.n >= offset && f.n - offset <= bytes && (!first || f.n < first->n))
      first = &f;
  if (!first) return {bytes, false};
  first->due = true;
  return {static_cast<size_t>(first->n - offset), true};
}

}  // namespace shamn::fault
