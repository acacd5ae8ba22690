#pragma once
// `--profile`, `--profile-trace PATH` and `--profile-steps N` on `shamn train`,
// `shamn eval` and `shamn bench`: a table of time per op, layer and phase at the
// end, and a Chrome trace (Perfetto) of a few steps.
#include <cstdint>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

namespace shamn::cli {

struct ProfileFlags {
  bool on = false;
  std::string trace;  // "" = the command's default
  int64_t trace_steps = 3;
  int64_t warmup_steps = 1;  // left out of the table (a command may change the default)
  std::string machine;       // `shamn machine --json` output; "" = measure at start
};

void add_profile_flags(CLI::App* command, ProfileFlags& flags, const std::string& default_trace);

// Turns the profiler on when --profile was given, with the roofline limits of
// --machine FILE, or else measured now (about 2.5 s, on the run's threads).
// Without `roofline` (a .shq model, whose kernels count no FLOPs or bytes) the
// table has no roofline, and no limits are read or measured.
void begin_profile(const ProfileFlags& flags, bool roofline = true);
// With --profile: prints the table to `table_out`, writes the trace (to
// --profile-trace, else `default_trace`) and says where it went.
void end_profile(const ProfileFlags& flags, const std::string& default_trace, std::FILE* table_out);
// For rank R > 0 of a data-parallel run: no table (rank 0 prints the run's), and
// the trace beside rank 0's as NAME.rankR.json, so the ranks' timelines can be
// laid side by side to see which one the others wait for.
void end_rank_profile(const ProfileFlags& flags, const std::string& default_trace, int rank);

}  // namespace shamn::cli
