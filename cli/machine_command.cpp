// `shamn machine`: this machine's own limits (core/machine_limits.h), the
// roofline that `--profile` holds the ops against. `shamn --threads N machine`
// measures "all cores" on N threads (default: every core).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/json_text.h"
#include "core/machine_limits_json.h"
#include "core/parallel.h"

namespace shamn::cli {

namespace {
struct MachineArgs {
  bool json = false;
  int repeats = 5;
  double probe_ms = 50;
};

void run_machine(const MachineArgs& a) {
  MachineProbeOptions o;
  o.threads = num_threads();
  o.repeats = a.repeats;
  o.probe_seconds = a.probe_ms / 1e3;
  const MachineLimits limits = measure_machine_limits(o);
  if (a.json)
    std::printf("%s\n", json_text(machine_limits_json(limits), 2).c_str());
  else
    std::printf("%s", format_machine_limits(limits).c_str());
}
}  // namespace

void register_machine_command(CLI::App& app) {
  auto a = std::make_shared<MachineArgs>();
  CLI::App* sc = app.add_subcommand(
      "machine",
      "measure this machine's f32/bf16 peak and L2/L3/DRAM bandwidth (read, update), one and all threads");
  sc->add_flag("--json", a->json, "print JSON (for --profile --machine FILE)");
  sc->add_option("--repeats", a->repeats, "runs of each probe; the median is kept")
      ->capture_default_str()
      ->check(CLI::Range(1, 101));
  sc->add_option("--probe-ms", a->probe_ms, "length of one run of a probe, milliseconds")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 10000.0));
  sc->callback([a] { run_machine(*a); });
}

}  // namespace shamn::cli
