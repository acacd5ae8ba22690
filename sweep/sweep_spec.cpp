#include "sweep/sweep_spec.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "core/check.h"
#include "core/config_table.h"

namespace shamn {

namespace {

// The value as TOML text; floats in their shortest round-tripping form with a
// decimal point ("0.1", "0.0", "1e-05"), so point names stay readable.
std::string literal(const toml::node& node) {
  if (const auto* f = node.as_floating_point()) {
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof buf, f->get()).ptr;
    std::string text(buf, end);
    if (text.find_first_of(".eninf") == std::string::npos) text += ".0";
    return text;
  }
  std::ostringstream out;
  node.visit([&out](const auto& v) { out << v; });
  return out.str();
}

// Integer settings of [sweep] that must be at least `min`.
int64_t positive(const toml::table& sweep, const std::string& path, const char* key, int64_t fallback,
                 int64_t min) {
  const toml::node* node = sweep.get(key);
  if (!node) return fallback;
  SHAMN_INPUT_CHECK(node->is_integer(), path, ": sweep.", key, " must be an integer");
  const int64_t v = node->as_integer()->get();
  SHAMN_INPUT_CHECK(v >= min, path, ": sweep.", key, " must be >= ", min, ", got ", v);
  return v;
}

// Collects the dotted leaves of [sweep.set] / [sweep.axes] (nested tables or
// quoted dotted keys alike) in file order.
void leaves(const toml::table& table, const std::string& prefix,
            std::vector<std::pair<std::string, const toml::node*>>& out) {
  std::vector<std::pair<std::string, const toml::node*>> here;
  for (const auto& [k, v] : table) here.emplace_back(prefix + std::string(k.str()), &v);
  // toml++ keeps keys sorted; the file order is the source position.
  std::stable_sort(here.begin(), here.end(), [](const auto& a, const auto& b) {
    const auto sa = a.second->source().begin, sb = b.second->source().begin;
    return sa.line != sb.line ? sa.line < sb.line : sa.column < sb.column;
  });
  for (const auto& [k, v] : here) {
    if (v->is_table())
      leaves(*v->as_table(), k + ".", out);
    else
      out.emplace_back(k, v);
  }
}

void check_known(const SweepSpec& spec, const char* table, const std::string& key) {
  const auto& known = RunConfig::known_keys();
  SHAMN_INPUT_CHECK(known.count(key), spec.path, ": ", table, ".", key, ": '", key,
                    "' is not a run config key (configs/README.md lists them)");
}

}  // namespace

SweepSpec SweepSpec::parse(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw InputError(path + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description()));
  }
  for (const auto& [k, v] : root)
    SHAMN_INPUT_CHECK(k.str() == "sweep", path, ": unknown top-level key '", k.str(),
                      "' (a sweep file has one [sweep] table; base config keys go in [sweep.set])");
  const toml::table* sweep = root["sweep"].as_table();
  SHAMN_INPUT_CHECK(sweep, path, ": no [sweep] table");
  static const std::set<std::string> known = {"base",         "out_dir", "seeds", "jobs", "threads_per_job",
                                              "eval_windows", "set",     "axes"};
  for (const auto& [k, v] : *sweep)
    SHAMN_INPUT_CHECK(known.count(std::string(k.str())), path, ":", v.source().begin.line,
                      ": unknown key sweep.", k.str(),
                      " (known: base, out_dir, seeds, jobs, threads_per_job, eval_windows, set, axes)");

  SweepSpec s;
  s.path = path;
  const auto base = (*sweep)["base"].value<std::string>();
  SHAMN_INPUT_CHECK(base && !base->empty(), path, ": sweep.base (the base run config, a string) is required");
  const std::filesystem::path base_path(*base);
  s.base = base_path.is_absolute()
               ? *base
               : (std::filesystem::path(path).parent_path() / base_path).lexically_normal().string();
  const auto out_dir = (*sweep)["out_dir"].value<std::string>();
  SHAMN_INPUT_CHECK(out_dir && !out_dir->empty(), path, ": sweep.out_dir (a string) is required");
  s.out_dir = *out_dir;
  s.jobs = positive(*sweep, path, "jobs", 1, 1);
  s.threads_per_job = positive(*sweep, path, "threads_per_job", 0, 0);
  s.eval_windows = positive(*sweep, path, "eval_windows", 64, 1);

  if (const toml::node* seeds = sweep->get("seeds")) {
    const toml::array* a = seeds->as_array();
    SHAMN_INPUT_CHECK(a && !a->empty(), path, ": sweep.seeds must be a non-empty array of integers");
    std::set<int64_t> seen;
    for (const toml::node& v : *a) {
      SHAMN_INPUT_CHECK(v.is_integer(), path, ": sweep.seeds must hold integers, got ", literal(v));
      const int64_t seed = v.as_integer()->get();
      SHAMN_INPUT_CHECK(seen.insert(seed).second, path, ": sweep.seeds lists ", seed, " twice");
      s.seeds.push_back(seed);
    }
  }
  if (const toml::node* set = sweep->get("set")) {
    SHAMN_INPUT_CHECK(set->is_table(), path, ": sweep.set must be a table of config keys");
    std::vector<std::pair<std::string, const toml::node*>> kv;
    leaves(*set->as_table(), "", kv);
    for (const auto& [k, v] : kv) s.set.push_back(k + "=" + literal(*v));
  }
  if (const toml::node* axes = sweep->get("axes")) {
    SHAMN_INPUT_CHECK(axes->is_table(), path, ": sweep.axes must be a table of config keys -> arrays");
    std::vector<std::pair<std::string, const toml::node*>> kv;
    leaves(*axes->as_table(), "", kv);
    for (const auto& [k, v] : kv) {
      const toml::array* a = v->as_array();
      SHAMN_INPUT_CHECK(a && !a->empty(), path, ":", v->source().begin.line, ": sweep.axes.", k,
                        " must be a non-empty array of values");
      SHAMN_INPUT_CHECK(a->is_homogeneous(), path, ":", v->source().begin.line, ": sweep.axes.", k,
                        " mixes value types");
      SHAMN_INPUT_CHECK(k != "train.seed", path, ": sweep.axes.train.seed: list seeds in sweep.seeds");
      SHAMN_INPUT_CHECK(k != "train.out_dir", path,
                        ": sweep.axes.train.out_dir: the sweep sets each point's run directory");
      SweepAxis axis{k, {}};
      std::set<std::string> seen;
      for (const toml::node& e : *a) {
        axis.values.push_back(literal(e));
        SHAMN_INPUT_CHECK(seen.insert(axis.values.back()).second, path, ": sweep.axes.", k, " lists ",
                          axis.values.back(), " twice");
      }
      s.axes.push_back(std::move(axis));
    }
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
  std::map<std::string, std::string> by_config;  // resolved config -> point name
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
