// The `shamn` command line: global options, then one subcommand per job.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "core/check.h"
#include "core/parallel.h"
#include "train/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"shamn: train and run Sparse Hierarchical Adaptive Memory Networks on CPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shamn ") + SHAMN_VERSION);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: every core)")
      ->check(CLI::NonNegativeNumber);
  app.parse_complete_callback([&] { shamn::set_num_threads(threads); });

  shamn::cli::register_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const shamn::Error& e) {
    std::fflush(stdout);
    std::cerr << "shamn: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "shamn: unexpected error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
