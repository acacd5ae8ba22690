#include "cli/commands.h"

namespace shamn::cli {

void register_commands(CLI::App& app) {
  register_model_commands(app);
  register_train_commands(app);
  register_infer_commands(app);
  register_serve_command(app);
  register_synthetic_command(app);
  register_machine_command(app);
  register_sweep_command(app);
  register_plot_command(app);
  register_analyze_command(app);
  register_tokenizer_commands(app);
}

}  // namespace shamn::cli
