#pragma once
// Runs gnuplot on a script, for the plots of `shamn plot` and the trainer's
// RUN_DIR/plots/loss.svg. gnuplot is optional: nothing that trains or reports
// numbers needs it, so finding it is a question, not a requirement.
#include <string>

namespace shamn {

// gnuplot's path on PATH, or "" when it is not installed.
std::string find_gnuplot();

// Runs `gnuplot` on `script` (written next to `work_prefix`, removed after).
// Returns "" on success, else what went wrong: gnuplot's first error line.
std::string run_gnuplot(const std::string& gnuplot, const std::string& script,
                        const std::string& work_prefix);

}  // namespace shamn
