#include "cli/profile_flags.h"

#include <filesystem>

#include "cli/flag_checks.h"
#include "core/atomic_file.h"
#include "core/machine_limits_json.h"
#include "core/parallel.h"
#include "core/profile_report.h"
#include "core/profiler.h"

namespace shamn::cli {

void add_profile_flags(CLI::App* command, ProfileFlags& flags, const std::string& default_trace) {
  CLI::Option* on =
      command->add_flag("--profile", flags.on,
                        "print time per op, layer and phase at the end and write a Chrome trace (Perfetto)");
  command->add_option("--profile-trace", flags.trace, "where the trace goes (default: " + default_trace + ")")
      ->needs(on);
  command->add_option("--profile-steps", flags.trace_steps, "steps traced, after a first warm-up step")
      ->capture_default_str()
      ->check(whole_number(0))
      ->needs(on);
  command
      ->add_option("--profile-warmup", flags.warmup_steps,
                   "first steps left out of the table (first-touch page faults, allocations); a run with "
                   "no more steps than this keeps them")
      ->capture_default_str()
      ->check(whole_number(0))
      ->needs(on);
  command
      ->add_option("--machine", flags.machine,
                   "machine limits for the roofline columns, from `shamn machine --json` (default: measure "
                   "them at start, about 2.5 s)")
      ->needs(on);
}

namespace {
RooflineLimits profile_machine_limits(const ProfileFlags& flags) {
  if (!flags.machine.empty()) {
    const MachineLimits m = read_machine_limits(flags.machine);
    if (m.threads != num_threads())
      std::fprintf(stderr, "roofline: %s was measured on %d threads, this run uses %d\n",
                   flags.machine.c_str(), m.threads, num_threads());
    return roofline_limits(m);
  }
  MachineProbeOptions o;
  o.threads = num_threads();
  o.repeats = 3;
  o.probe_seconds = 0.02;
  std::fprintf(stderr, "roofline: measuring this machine's limits on %d threads (shamn machine)\n",
               o.threads);
  const MachineLimits m = measure_machine_limits(o);
  std::fprintf(stderr, "%s", format_machine_limits(m).c_str());
  return roofline_limits(m);
}
}  // namespace

void begin_profile(const ProfileFlags& flags, bool roofline) {
  if (!flags.on) return;
  if (!flags.trace.empty()) check_output_path(flags.trace);  // before the work, not after it
  if (roofline) set_profile_limits(profile_machine_limits(flags));
  ProfileOptions options;
  options.trace_steps = flags.trace_steps;
  options.warmup_steps = flags.warmup_steps;
  start_profiling(options);
}

void end_profile(const ProfileFlags& flags, const std::string& default_trace, std::FILE* table_out) {
  if (!flags.on) return;
  stop_profiling();
  const ProfileReport report = profile_report();
  std::fflush(stdout);
  std::fprintf(table_out, "\n%s", format_profile_table(report).c_str());
  const std::string path = flags.trace.empty() ? default_trace : flags.trace;
  const size_t events = write_chrome_trace(report, path);
  if (report.first_traced_step > 0)
    std::fprintf(table_out,
                 "profile trace: %s (%zu events, steps %lld-%lld; open in https://ui.perfetto.dev)\n",
                 path.c_str(), events, static_cast<long long>(report.first_traced_step),
                 static_cast<long long>(report.last_traced_step));
  else
    std::fprintf(table_out, "profile trace: %s (no step traced)\n", path.c_str());
  if (report.dropped_events > 0)
    std::fprintf(table_out, "profile trace: %lld events past the per-thread limit were left out\n",
                 static_cast<long long>(report.dropped_events));
  std::fflush(table_out);
}

void end_rank_profile(const ProfileFlags& flags, const std::string& default_trace, int rank) {
  if (!flags.on) return;
  stop_profiling();
  std::filesystem::path path = flags.trace.empty() ? default_trace : flags.trace;
  path.replace_filename(path.stem().string() + ".rank" + std::to_string(rank) + path.extension().string());
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  write_chrome_trace(profile_report(), path.string());
}

}  // namespace shamn::cli
