#pragma once
// Runs gnuplot on a script, for the plots of `shamn plot` and the trainer's
// RUN_DIR/plots/loss.svg. gnuplot is optional: nothing that trains or reports
// numbers needs it, so finding it is a question, not a requirement.
#include <functional>
#include <string>

namespace shamn {

// gnuplot's path on PATH, or "" when it is not installed.
std::string find_gnuplot();

// Runs `gnuplot` on `script`, written next to the file `work_prefix` names under
// its private temporary name (core/atomic_file.h), removed after with its log.
// Returns "" on success, else what went wrong: gnuplot's error line, which names
// the script as `shown_as` where given (a file with the same lines).
std::string run_gnuplot(const std::string& gnuplot, const std::string& script, const std::string& work_prefix,
                        const std::string& shown_as = "");

// A gnuplot single-quoted string ('' is a quote).
std::string gnuplot_quoted(const std::string& s);

// The `set terminal` line for `output`: .svg gives svg, anything else png
// (pngcairo where gnuplot has it).
std::string gnuplot_terminal(const std::string& output, int width, int height);

// gnuplot exits 0 when it cannot write its output (a full disk, a file size
// limit) and leaves a torn picture: a whole one is an .svg that ends with its
// closing tag or a PNG that ends with its IEND chunk.
bool picture_is_complete(const std::string& path);

// Renames `drawn` (a picture gnuplot wrote under a private name) over `output`
// once it is whole and fsynced; else removes it and throws InputError naming
// `output`, which is left as it was.
void publish_picture(const std::string& drawn, const std::string& output);

// Draws `output` (.png or .svg; its directory must exist): gnuplot runs
// script(tmp), which draws into a private name, then tmp is renamed over the
// picture, so a reader (a browser refreshing it) never sees half of one.
// InputError naming `output` when gnuplot is missing or fails.
void draw_with_gnuplot(const std::string& output,
                       const std::function<std::string(const std::string&)>& script);

}  // namespace shamn
