#pragma once
// The distributions behind `shamn analyze`'s tables, drawn by gnuplot:
//   expert_load.{png,svg}   each MoE layer's share of selections per expert
//                           (bars, coloured by group) against the uniform share;
//   memory_slots.{png,svg}  each memory layer's slots sorted by reads, most
//                           read first, on a log scale (a flat line is even use).
#include <string>
#include <vector>

#include "train/model_analysis.h"

namespace shamn {

// The scripts (data inline) that draw into `output`; its extension picks the terminal.
std::string expert_load_script(const ModelAnalysis& a, const std::string& title, const std::string& output);
std::string memory_slots_script(const ModelAnalysis& a, const std::string& title, const std::string& output);

// Creates `dir` if need be; InputError naming it when it cannot.
void make_plot_dir(const std::string& dir);

// Both pictures in both formats into `dir` (make_plot_dir); `title` heads them (the
// model's name). Returns the files written; a model without MoE or memory
// layers has none of that picture. InputError when gnuplot is missing or fails.
std::vector<std::string> write_analysis_plots(const ModelAnalysis& a, const std::string& title,
                                              const std::string& dir);

}  // namespace shamn
