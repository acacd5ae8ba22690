// `shamn sweep`'s engine: every point of a sweep file run as its own training
// run (in parallel with jobs), then results.csv, summary.md and the plots. A
// rerun skips finished points and resumes interrupted ones.
#include "sweep/sweep_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/file_lock.h"
#include "sweep/child_process.h"
#include "sweep/sweep_point.h"
#include "sweep/sweep_report.h"
#include "sweep/sweep_spec.h"
#include "train/gnuplot.h"

namespace shamn {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Each point's directory keeps its resolved config; a different one there means
// the directory belongs to another sweep, and mixing results would be wrong.
void check_configs(const std::vector<SweepPoint>& points) {
  for (const SweepPoint& p : points) {
    const std::string path = (fs::path(p.dir) / "config.toml").string();
    if (fs::exists(path))
      SHAMN_INPUT_CHECK(
          read_text(path) == p.config.to_toml(), "'", path,
          "' holds a different config from the one this sweep resolves for point ", p.name,
          ": the directory belongs to another sweep (or the sweep file or base config changed); "
          "pick another sweep.out_dir (--out-dir) or delete ",
          p.dir);
  }
}

void write_configs(const std::vector<SweepPoint>& points) {
  for (const SweepPoint& p : points) {
    fs::create_directories(p.dir);
    const std::string path = (fs::path(p.dir) / "config.toml").string();
    if (!fs::exists(path)) write_file_atomically(path, p.config.to_toml());
  }
}

// One sweep per directory at a time: two would train the same points into the
// same run directories. The children inherit the lock, so it lasts until the
// sweep and every child it started have ended, however they end: after a
// `kill -9` of the sweep alone, a rerun waits for its orphans.
std::string sweep_lock_held(const std::string& dir, const std::string& path) {
  return "another shamn sweep is running in '" + dir + "' (it holds " + path +
         "): wait for it, or stop it with Ctrl-C. If its sweep process was killed, the trainers it started "
         "still hold the lock until they end (`fuser " +
         path + "` lists them)";
}

// gnuplot draws the plots when it is installed; the CSV and summary never need it.
// It draws them into a private directory; each whole one then replaces its old
// picture (gnuplot exits 0 on a full disk, leaving torn files where it wrote).
void draw_plots(const SweepSpec& spec, const std::vector<SweepRow>& rows) {
  const fs::path out(spec.out_dir);
  const std::string data = (out / "plot_data.tsv").string(), script = (out / "plots.gnuplot").string();
  fs::create_directories(out / "plots");
  write_file_atomically(data, plot_data_tsv(spec.axes, rows));
  write_file_atomically(script, gnuplot_script(spec.axes, rows, data, (out / "plots").string()));
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty()) {
    std::printf(
        "warning: gnuplot is not installed (apt-get install gnuplot-nox): no plots; "
        "the data and script are in %s and %s\n",
        data.c_str(), script.c_str());
    return;
  }
  // The sweep's lock is held: a staging directory left here was a killed sweep's.
  for (const fs::directory_entry& e : fs::directory_iterator(out))
    if (e.path().filename().string().starts_with(".plots.tmp.")) fs::remove_all(e.path());
  const fs::path staging = out / (".plots.tmp." + std::to_string(::getpid()));
  fs::create_directories(staging);
  // The staged script has plots.gnuplot's lines but for the output names: its
  // errors are told by plots.gnuplot's name, which the user can rerun.
  std::vector<std::string> errors;
  const std::string failed =
      run_gnuplot(gnuplot, gnuplot_script(spec.axes, rows, data, staging.string()), script, script);
  if (!failed.empty()) errors.push_back(failed);
  // Every whole picture is published, those drawn before a failure included.
  std::vector<fs::path> drawn;
  for (const fs::directory_entry& e : fs::directory_iterator(staging)) drawn.push_back(e.path());
  std::sort(drawn.begin(), drawn.end());
  for (const fs::path& picture : drawn) {
    try {
      publish_picture(picture.string(), (out / "plots" / picture.filename()).string());
    } catch (const InputError& e) {
      errors.push_back(e.what());
    }
  }
  fs::remove_all(staging);
  for (const std::string& e : errors) std::printf("warning: %s\n", e.c_str());
  if (!errors.empty())
    std::printf(
        "warning: a plot not drawn whole keeps its earlier picture; results.csv and summary.md are "
        "complete\n");
  std::printf("plots in %s (png and svg)\n", (out / "plots").string().c_str());
}

}  // namespace

void run_sweep(const std::string& file, const SweepOptions& a) {
  SweepSpec spec = SweepSpec::from_file(file);
  if (!a.out_dir.empty()) spec.out_dir = a.out_dir;
  if (a.jobs > 0) spec.jobs = a.jobs;
  if (a.threads_per_job > 0) spec.threads_per_job = a.threads_per_job;
  // Every point is resolved and validated before anything runs.
  const std::vector<SweepPoint> points = expand_sweep(spec, a.overrides);
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  PointSettings settings;
  settings.exe = self_executable();
  settings.threads =
      spec.threads_per_job > 0 ? spec.threads_per_job : std::max<int64_t>(1, cores / spec.jobs);
  settings.eval_windows = spec.eval_windows;

  // Taken before the points' states are read: a sweep started as another finishes
  // must see the points that one finished, not redo them. A dry run reads only.
  std::optional<FileLock> sweep_lock;
  if (!a.dry_run) {
    fs::create_directories(spec.out_dir);
    const std::string path = (fs::path(spec.out_dir) / ".sweep.lock").string();
    sweep_lock.emplace(path, FileLock::Children::kInherit, sweep_lock_held(spec.out_dir, path));
  }
  // Before any point is called finished: a dry run must refuse what a run refuses.
  check_configs(points);
  std::vector<const SweepPoint*> todo, skipped;
  int64_t resumable = 0, unanalysed = 0;
  for (const SweepPoint& p : points) {
    const PointState state = point_state(p);
    (state == PointState::finished ? skipped : todo).push_back(&p);
    if (state == PointState::interrupted) ++resumable;
    if (state == PointState::unanalysed) ++unanalysed;
  }
  const auto finished = static_cast<int64_t>(skipped.size());
  std::printf(
      "sweep %s: %zu points (%zu axes x %zu seeds) in %s; %lld finished (skipped), %lld to analyse, "
      "%lld to resume, %lld new; %lld jobs x %lld threads\n",
      file.c_str(), points.size(), spec.axes.size(), std::max<size_t>(1, spec.seeds.size()),
      spec.out_dir.c_str(), static_cast<long long>(finished), static_cast<long long>(unanalysed),
      static_cast<long long>(resumable), static_cast<long long>(todo.size()) - resumable - unanalysed,
      static_cast<long long>(spec.jobs), static_cast<long long>(settings.threads));
  for (const SweepPoint* p : skipped) std::printf("  skipped %s (finished)\n", p->name.c_str());
  if (a.dry_run) {
    for (const SweepPoint* p : todo)
      std::printf("  would %s %s\n", point_state(*p) == PointState::unanalysed ? "analyse" : "run",
                  p->name.c_str());
    return;
  }
  write_configs(points);
  std::fflush(stdout);

  std::mutex print;
  std::atomic<size_t> next{0};
  std::vector<std::string> failures;
  auto worker = [&] {
    while (!stop_requested()) {
      const size_t i = next++;
      if (i >= todo.size()) break;
      const SweepPoint& p = *todo[i];
      {
        std::lock_guard lock(print);
        const PointState state = point_state(p);
        std::printf("  %s %s\n",
                    state == PointState::interrupted  ? "resuming"
                    : state == PointState::unanalysed ? "analysing (no retraining)"
                                                      : "running",
                    p.name.c_str());
        std::fflush(stdout);
      }
      std::string outcome;
      try {
        outcome = run_point(p, settings) ? "finished" : "stopped (a rerun resumes it)";
      } catch (const std::exception& e) {  // a bad file or JSON too: this point fails, the others go on
        outcome = std::string("FAILED, ") + e.what();
        std::lock_guard lock(print);
        failures.push_back(p.name);
      }
      std::lock_guard lock(print);
      std::printf("  %s: %s\n", p.name.c_str(), outcome.c_str());
      std::fflush(stdout);
    }
  };
  {
    const ChildStopGuard guard;
    std::vector<std::thread> pool;
    const size_t jobs = std::min<size_t>(static_cast<size_t>(spec.jobs), todo.size());
    for (size_t j = 0; j < jobs; ++j) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }

  std::vector<SweepRow> rows;
  std::vector<std::string> unfinished;
  for (const SweepPoint& p : points)
    if (point_state(p) == PointState::finished)
      rows.push_back(read_point_result(p));
    else
      unfinished.push_back(p.name);
  const fs::path out(spec.out_dir);
  write_file_atomically((out / "results.csv").string(), results_csv(spec.axes, rows));
  write_file_atomically((out / "summary.md").string(), summary_markdown(spec, rows, unfinished));
  std::printf("%zu of %zu points finished: %s, %s\n", rows.size(), points.size(),
              (out / "results.csv").string().c_str(), (out / "summary.md").string().c_str());
  if (!rows.empty()) draw_plots(spec, rows);
  SHAMN_INPUT_CHECK(!stop_requested(), "sweep stopped by a signal with ", points.size() - rows.size(),
                    " points unfinished: run the same command again to resume them");
  if (!failures.empty()) {
    std::string names;
    for (const std::string& f : failures) {
      if (!names.empty()) names += ", ";
      names += f;
    }
    throw InputError(std::to_string(failures.size()) + " points failed (" + names +
                     "); each point's log.txt says why, and a rerun retries them");
  }
}

}  // namespace shamn
