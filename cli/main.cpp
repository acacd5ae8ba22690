// The `shamn` command line: global options, then one subcommand per job.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "core/check.h"
#include "core/fault.h"
#include "core/heap_policy.h"
#include "core/kernel_level.h"
#include "core/parallel.h"
#include "core/temp_file_cleanup.h"
#include "train/communicator.h"

namespace {

// The first word that is not a global option: the command the user meant to run.
std::string command_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads")
      ++i;
    else if (!arg.empty() && arg[0] != '-')
      return arg;
  }
  return "";
}

// CLI11 reports an unknown command as "a subcommand is required"; name it instead.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  const std::string word = command_word(argc, argv);
  if (word.empty() || !app.get_subcommands().empty()) return e.what();
  std::string commands;
  for (const CLI::App* sub : app.get_subcommands(std::function<bool(const CLI::App*)>{}))
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
  return "unknown command '" + word + "' (the commands are " + commands + ")";
}

}  // namespace

int main(int argc, char** argv) {
  shamn::keep_freed_memory_in_process();  // before the first allocation worth keeping
  // Past a file size limit (ulimit -f) a write then fails with EFBIG, which every
  // writer reports naming its file and cleans up after, instead of the process
  // dying by SIGXFSZ with no word and a temporary file left behind.
  std::signal(SIGXFSZ, SIG_IGN);
  // Ctrl-C in a command with no handler of its own (export, prepare, eval ...)
  // removes the file it is writing; train, serve and sweep install their own.
  shamn::remove_temp_files_on_stop_signals();
  CLI::App app{"shamn: train and run Sparse Hierarchical Adaptive Memory Networks on CPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shamn ") + SHAMN_VERSION);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: every core)")
      ->check(shamn::cli::whole_number(0));
  app.parse_complete_callback([&] { shamn::set_num_threads(threads); });

  shamn::cli::register_commands(app);

  try {
    shamn::fault::check_environment();
    shamn::default_kernel_level();  // a bad SHAMN_KERNEL is reported before any work
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // The argument parser's errors go the way of every other error: one line, status 1.
    std::cerr << "shamn: error: " << parse_error_message(app, e, argc, argv) << " (see shamn --help)\n";
    return 1;
  } catch (const shamn::Error& e) {
    std::fflush(stdout);
    std::cerr << "shamn: error: " << e.what() << "\n";
    shamn::abort_all_ranks_on_error(1);
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "shamn: unexpected error: " << e.what() << "\n";
    shamn::abort_all_ranks_on_error(2);
    return 2;
  }
  // A full disk under `> out.json` must not pass for success.
  errno = 0;
  std::cout.flush();  // through stdout's buffer: the same error either way
  std::fflush(stdout);
  const int flush_errno = errno;
  if (std::ferror(stdout)) {
    std::cerr << "shamn: error: writing standard output failed"
              << (flush_errno ? std::string(": ") + std::strerror(flush_errno) : std::string()) << "\n";
    return 1;
  }
  return 0;
}
