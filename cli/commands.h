#pragma once
#include <CLI/CLI.hpp>

namespace shamn::cli {

// Adds every subcommand to the app; each runs from its own callback.
void register_commands(CLI::App& app);

void register_infer_commands(CLI::App& app);
void register_serve_command(CLI::App& app);
void register_model_commands(CLI::App& app);
void register_train_commands(CLI::App& app);
void register_synthetic_command(CLI::App& app);
void register_machine_command(CLI::App& app);
void register_sweep_command(CLI::App& app);
void register_plot_command(CLI::App& app);
void register_analyze_command(CLI::App& app);
void register_tokenizer_commands(CLI::App& app);

}  // namespace shamn::cli
