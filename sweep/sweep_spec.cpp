#include "sweep/sweep_spec.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/config_table.h"

namespace shamn {

namespace {

// Integer settings of [sweep] that must be at least `min`.
int64_t at_least(const ConfigTable& file, const char* key, int64_t fallback, int64_t min,
                 int64_t max = std::numeric_limits<int64_t>::max()) {
  const std::string name = std::string("sweep.") + key;
  const int64_t v = file.get_int(name).value_or(fallback);
  SHAMN_INPUT_CHECK(v >= min, file.where(name), ": ", name, " must be >= ", min, ", got ", v);
  SHAMN_INPUT_CHECK(v <= max, file.where(name), ": ", name, " must be <= ", max, ", got ", v);
  return v;
}

// A point's name is its directory: it must be a file name, and no two points may
// share one (values that differ only where point_name_part writes '_').
void check_point_name(const SweepSpec& spec, const SweepPoint& p,
                      std::map<std::string, std::vector<std::string>>& by_name) {
  constexpr size_t kMaxFileName = 255;  // NAME_MAX on Linux's file systems
  SHAMN_INPUT_CHECK(p.name.size() <= kMaxFileName, spec.path, ": point '", p.name.substr(0, 80),
                    "...' has a name of ", p.name.size(), " bytes, longer than a directory name may be (",
                    kMaxFileName, "): shorten the sweep.axes values or keys");
  const auto [it, fresh] = by_name.emplace(p.name, p.axis_values);
  if (fresh) return;
  std::string values;
  for (size_t a = 0; a < spec.axes.size(); ++a)
    if (it->second[a] != p.axis_values[a])
      values += " sweep.axes." + spec.axes[a].key + " values " + it->second[a] + " and " + p.axis_values[a];
  SHAMN_INPUT_CHECK(false, spec.path, ": two points would share the directory '", p.name, "':", values,
                    " differ only in characters a directory name replaces with '_' (anything but letters, "
                    "digits and . _ + -)");
}

void check_known(const SweepSpec& spec, const char* table, const std::string& key) {
  const auto& known = RunConfig::known_keys();
  SHAMN_INPUT_CHECK(known.count(key), spec.path, ": ", table, ".", key, ": '", key,
                    "' is not a run config key (configs/README.md lists them)");
}

}  // namespace

SweepSpec SweepSpec::parse(const std::string& text, const std::string& path) {
  const ConfigTable file = ConfigTable::parse(text, path);
  for (const std::string& k : file.children(""))
    SHAMN_INPUT_CHECK(k == "sweep", file.where(k), ": unknown top-level key '", k,
                      "' (a sweep file has one [sweep] table; base config keys go in [sweep.set])");
  SHAMN_INPUT_CHECK(file.has("sweep"), path, ": no [sweep] table");
  static const std::set<std::string> known = {"base",         "out_dir", "seeds", "jobs", "threads_per_job",
                                              "eval_windows", "set",     "axes"};
  for (const std::string& k : file.children("sweep"))
    SHAMN_INPUT_CHECK(known.count(k), file.where("sweep." + k), ": unknown key sweep.", k,
                      " (known: base, out_dir, seeds, jobs, threads_per_job, eval_windows, set, axes)");

  SweepSpec s;
  s.path = path;
  const auto base = file.get_string("sweep.base");
  SHAMN_INPUT_CHECK(base && !base->empty(), path, ": sweep.base (the base run config, a string) is required");
  const std::filesystem::path base_path(*base);
  s.base = base_path.is_absolute()
               ? *base
               : (std::filesystem::path(path).parent_path() / base_path).lexically_normal().string();
  const auto out_dir = file.get_string("sweep.out_dir");
  SHAMN_INPUT_CHECK(out_dir && !out_dir->empty(), path, ": sweep.out_dir (a string) is required");
  s.out_dir = *out_dir;
  s.jobs = at_least(file, "jobs", 1, 1, kMaxSweepJobs);
  s.threads_per_job = at_least(file, "threads_per_job", 0, 0);
  s.eval_windows = at_least(file, "eval_windows", 64, 1);

  if (const auto seeds = file.get_int_array("sweep.seeds")) {
    SHAMN_INPUT_CHECK(!seeds->empty(), file.where("sweep.seeds"), ": sweep.seeds must be a non-empty array");
    std::set<int64_t> seen;
    for (const int64_t seed : *seeds) {
      SHAMN_INPUT_CHECK(seed >= 0, file.where("sweep.seeds"), ": sweep.seeds lists ", seed,
                        ": seeds are >= 0 (as train.seed)");
      SHAMN_INPUT_CHECK(seen.insert(seed).second, path, ": sweep.seeds lists ", seed, " twice");
      s.seeds.push_back(seed);
    }
  }
  for (const ConfigTable::Leaf& leaf : file.leaves("sweep.set"))
    s.set.push_back(leaf.key + "=" + leaf.literal);
  for (const ConfigTable::Leaf& leaf : file.leaves("sweep.axes")) {
    const std::string& k = leaf.key;
    SHAMN_INPUT_CHECK(leaf.is_array && !leaf.elements.empty(), leaf.where, ": sweep.axes.", k,
                      " must be a non-empty array of values");
    SHAMN_INPUT_CHECK(!leaf.mixed_types, leaf.where, ": sweep.axes.", k, " mixes value types");
    SHAMN_INPUT_CHECK(k != "train.seed", path, ": sweep.axes.train.seed: list seeds in sweep.seeds");
    SHAMN_INPUT_CHECK(k != "train.out_dir", path,
                      ": sweep.axes.train.out_dir: the sweep sets each point's run directory");
    SweepAxis axis{k, {}};
    std::set<std::string> seen;
    for (const std::string& value : leaf.elements) {
      SHAMN_INPUT_CHECK(seen.insert(value).second, path, ": sweep.axes.", k, " lists ", value, " twice");
      axis.values.push_back(value);
    }
    s.axes.push_back(std::move(axis));
  }
  // Multiplied step by step so that a huge product stops at the limit instead of overflowing.
  int64_t points = std::max<int64_t>(1, static_cast<int64_t>(s.seeds.size()));
  SHAMN_INPUT_CHECK(points <= kMaxSweepPoints, path, ": sweep.seeds lists ", points, " seeds, more than the ",
                    kMaxSweepPoints, " points a sweep may have");
  for (const SweepAxis& a : s.axes) {
    SHAMN_INPUT_CHECK(static_cast<int64_t>(a.values.size()) <= kMaxSweepPoints / points, path,
                      ": sweep.axes.", a.key, ": the axes and seeds make more than ", kMaxSweepPoints,
                      " points (", points, " before this axis of ", a.values.size(), " values)");
    points *= static_cast<int64_t>(a.values.size());
  }
  return s;
}

int64_t sweep_point_count(const SweepSpec& spec) {
  int64_t points = std::max<int64_t>(1, static_cast<int64_t>(spec.seeds.size()));
  for (const SweepAxis& a : spec.axes) points *= static_cast<int64_t>(a.values.size());
  return points;
}

SweepSpec SweepSpec::from_file(const std::string& path) {
  std::ifstream in(path);
  SHAMN_INPUT_CHECK(in, "cannot read sweep file '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

std::string point_name_part(const std::string& key, const std::string& value) {
  std::string name = (key.rfind("model.", 0) == 0 ? key.substr(6) : key) + "=";
  for (char ch : value) {
    const bool safe =
        std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '+' || ch == '-';
    name += safe ? ch : '_';
  }
  return name;
}

std::vector<SweepPoint> expand_sweep(const SweepSpec& spec, const std::vector<std::string>& extra_set) {
  // The error_code overload: a name the OS refuses (too long, a loop of links)
  // must be this InputError, not a std::filesystem_error.
  std::error_code fs_error;
  SHAMN_INPUT_CHECK(std::filesystem::is_regular_file(spec.base, fs_error), spec.path,
                    ": sweep.base: the base config '", spec.base, "' does not exist",
                    fs_error ? " (" + fs_error.message() + ")" : std::string(),
                    " (the path is relative to the sweep file)");
  for (const std::string& o : spec.set) check_known(spec, "sweep.set", o.substr(0, o.find('=')));
  for (const SweepAxis& a : spec.axes) check_known(spec, "sweep.axes", a.key);
  std::vector<size_t> index(spec.axes.size(), 0);
  std::vector<SweepPoint> points;
  std::map<std::string, std::string> by_config;             // resolved config -> point name
  std::map<std::string, std::vector<std::string>> by_name;  // point name -> its axis values
  const std::vector<int64_t> seeds = spec.seeds.empty() ? std::vector<int64_t>{-1} : spec.seeds;
  for (bool more = true; more;) {
    for (int64_t seed : seeds) {
      SweepPoint p;
      // A fresh parse per point: copies of a ConfigTable share their document.
      ConfigTable table = ConfigTable::parse_file(spec.base);
      std::string where = "sweep.set";
      try {
        for (const std::string& o : spec.set) table.set_from_text(o);
        where = "--set";
        for (const std::string& o : extra_set) table.set_from_text(o);
        for (size_t a = 0; a < spec.axes.size(); ++a) {
          where = "sweep.axes." + spec.axes[a].key;
          p.axis_values.push_back(spec.axes[a].values[index[a]]);
          table.set_from_text(spec.axes[a].key + "=" + p.axis_values.back());
          if (!p.name.empty()) p.name += ',';
          p.name += point_name_part(spec.axes[a].key, p.axis_values.back());
        }
        where = "sweep.seeds";
        if (seed >= 0) table.set_from_text("train.seed=" + std::to_string(seed));
        where = "the resolved config";
        const RunConfig probe = RunConfig::from_table(table);
        p.seed = probe.train.seed;
        if (!p.name.empty()) p.name += ',';
        p.name += "seed=" + std::to_string(p.seed);
        p.dir = (std::filesystem::path(spec.out_dir) / p.name).string();
        table.set_from_text("train.out_dir=" + toml_string((std::filesystem::path(p.dir) / "run").string()));
        p.config = RunConfig::from_table(table);
        p.config.validate();
      } catch (const InputError& e) {
        // A value the run config rejects: name the sweep key that set it.
        const std::string what = e.what();
        for (const SweepAxis& a : spec.axes)
          if (what.find(a.key) != std::string::npos) where = "sweep.axes." + a.key;
        throw InputError(spec.path + ": " + where + (p.name.empty() ? "" : " (point " + p.name + ")") + ": " +
                         e.what());
      }
      check_point_name(spec, p, by_name);
      SHAMN_INPUT_CHECK(!p.config.data.val_path.empty(), spec.path,
                        ": a sweep needs data.val_path (every point reports its val perplexity)");
      // The same resolved config twice means an axis changes nothing (e.g.
      // model.embed.sparsity while model.embed.buckets is set).
      RunConfig key = p.config;
      key.train.out_dir.clear();
      // Sparsities only matter through the table rows and active blocks they
      // give (0.9 and 0.95 of 8 blocks both keep 1), so compare those.
      ModelConfig& m = key.model;
      const MoeOptions moe = m.moe();
      m.embed_buckets = m.embed().buckets;
      m.embed_sparsity = 0;
      m.mixer_sparsity = static_cast<double>(m.mixer().out.active_blocks());
      // Up and down in fields of their own: a product key overflowed for a huge model.dim.
      m.moe_sparsity = static_cast<double>(moe.up.active_blocks());
      m.sparsity = static_cast<double>(moe.down.active_blocks());
      const auto [it, fresh] = by_config.emplace(key.to_toml(), p.name);
      SHAMN_INPUT_CHECK(
          fresh, spec.path, ": points '", it->second, "' and '", p.name,
          "' resolve to the same model and training: an axis value has no effect (a sparsity "
          "that keeps the same number of blocks of model.sparse.block, or a key another overrides)");
      points.push_back(std::move(p));
    }
    // Odometer over the axes, the last fastest.
    more = false;
    for (size_t a = spec.axes.size(); a-- > 0;) {
      if (++index[a] < spec.axes[a].values.size()) {
        more = true;
        break;
      }
      index[a] = 0;
    }
  }
  return points;
}

}  // namespace shamn
