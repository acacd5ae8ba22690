#pragma once
// A sweep file: a base run config, fixed overrides and axes over any config keys
// (their cartesian product, times the seeds), each point a run of its own in
// <out_dir>/<point name>/. configs/README.md documents the keys.
#include <cstdint>
#include <string>
#include <vector>

#include "train/run_config.h"

namespace shamn {

// More points than any sweep one machine can run: a bigger cartesian product is
// almost surely a mistake (an axis listed twice the size it should be), and
// expanding it would resolve millions of configs before the first run.
inline constexpr int64_t kMaxSweepPoints = 10000;
// Points run at once: every running child must fit the signal handler's table
// (sweep/child_process.cpp), or Ctrl-C would miss it.
inline constexpr int64_t kMaxSweepJobs = 256;

struct SweepAxis {
  std::string key;                  // dotted run-config key, e.g. "model.sparse.sparsity"
  std::vector<std::string> values;  // TOML literals, e.g. "0.9"
};

struct SweepSpec {
  std::string path;            // the sweep file (errors name it)
  std::string base;            // the base run config, resolved against the sweep file's directory
  std::string out_dir;         // relative to the working directory, like train.out_dir
  std::vector<int64_t> seeds;  // train.seed values; empty = the base config's seed
  int64_t jobs = 1;
  int64_t threads_per_job = 0;   // 0 = cores / jobs
  int64_t eval_windows = 64;     // val windows for the f32 / int8 comparison
  std::vector<std::string> set;  // "key=value" overrides of the base, in order
  std::vector<SweepAxis> axes;

  // Throws InputError naming the file for a bad key or value, and for more
  // than kMaxSweepPoints points.
  static SweepSpec parse(const std::string& text, const std::string& path);
  static SweepSpec from_file(const std::string& path);
};

struct SweepPoint {
  std::string name;                      // e.g. "sparse.sparsity=0.9,seed=2"
  std::vector<std::string> axis_values;  // one per axis, as in SweepAxis::values
  int64_t seed = 0;                      // the resolved train.seed
  std::string dir;                       // <out_dir>/<name>
  RunConfig config;                      // resolved; train.out_dir = <dir>/run
};

// The number of points: the product of the axis lengths times the seeds (at
// most kMaxSweepPoints for a parsed spec).
int64_t sweep_point_count(const SweepSpec& spec);

// Every point of the sweep (axes in file order, the last varying fastest, then
// seeds), each config resolved and validated; a bad key or value throws
// InputError naming the sweep file and the key. `extra_set` are command-line
// overrides applied after [sweep.set].
std::vector<SweepPoint> expand_sweep(const SweepSpec& spec, const std::vector<std::string>& extra_set = {});

// A point name's part for one axis: the key without "model.", '=', the value,
// with anything but [A-Za-z0-9._+-] turned into '_' so it is a safe path.
std::string point_name_part(const std::string& key, const std::string& value);

}  // namespace shamn
