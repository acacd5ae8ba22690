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
};

void add_profile_flags(CLI::App* command, ProfileFlags& flags, const std::string& default_trace);

// Turns the profiler on when --profile was given.
void begin_profile(const ProfileFlags& flags);
// With --profile: prints the table to `table_out`, writes the trace (to
// --profile-trace, else `default_trace`) and says where it went.
void end_profile(const ProfileFlags& flags, const std::string& default_trace, std::FILE* table_out);

}  // namespace shamn::cli
