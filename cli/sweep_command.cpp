// `shamn sweep SWEEP.toml`: the flags; sweep/sweep_runner.h runs it.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "sweep/sweep_runner.h"
#include "sweep/sweep_spec.h"

namespace shamn::cli {

void register_sweep_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto a = std::make_shared<SweepOptions>();
  CLI::App* sc = app.add_subcommand(
      "sweep",
      "train every point of a sweep file (configs/README.md), then write results.csv, summary.md and plots");
  sc->add_option("sweep_file", *file, "sweep TOML file")->required()->check(CLI::ExistingFile);
  sc->add_option("--jobs", a->jobs, "points run at once (default: sweep.jobs, else 1)")
      ->check(CLI::Range(int64_t{1}, kMaxSweepJobs));
  sc->add_option("--threads-per-job", a->threads_per_job, "threads per point (default: cores / jobs)")
      ->check(whole_number(1));
  sc->add_option("--out-dir", a->out_dir, "sweep directory (default: sweep.out_dir)");
  sc->add_option("--set", a->overrides,
                 "override a base config key for every point (repeatable; TOML values)")
      ->allow_extra_args(false);
  sc->add_flag("--dry-run", a->dry_run, "list the points and what a run would do, run nothing");
  sc->callback([file, a] { run_sweep(*file, *a); });
}

}  // namespace shamn::cli
