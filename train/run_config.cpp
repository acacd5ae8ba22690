#include "train/run_config.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/config_table.h"

namespace shamn {

namespace {

// A low-rank adapter of rank above this is not low-rank for any SHAMN layer.
constexpr int64_t kMaxLoraRank = 1024;

const std::set<std::string>& all_known_keys() {
  static const std::set<std::string> known = [] {
    std::set<std::string> k = ModelConfig::known_keys();
    k.insert({"data",
              "data.train_path",
              "data.val_path",
              "data.format",
              "data.tokenizer",
              "train",
              "train.batch_size",
              "train.seq_len",
              "train.grad_accum",
              "train.max_steps",
              "train.seed",
              "train.out_dir",
              "train.checkpoint_every",
              "train.keep_last",
              "train.eval_every",
              "train.eval_batches",
              "train.max_bad_steps",
              "train.init_from",
              "train.init",
              "train.init_std",
              "train.init_scale_residual",
              "train.prefetch",
              "train.precision",
              "train.overlap_exchange",
              "train.bucket_mib",
              "optim",
              "optim.lr",
              "optim.min_lr",
              "optim.warmup_steps",
              "optim.weight_decay",
              "optim.grad_clip",
              "optim.beta1",
              "optim.beta2",
              "optim.eps",
              "lora",
              "lora.rank",
              "lora.alpha",
              "lora.rslora",
              "lora.dropout",
              "lora.targets",
              "log",
              "log.every",
              "log.progress"});
    return k;
  }();
  return known;
}

// Reads typed values, remembering which keys must be present.
struct Reader {
  const ConfigTable& t;

  template <class T, class Get>
  void read(const std::string& key, T& out, bool required, Get get) const {
    auto v = get(key);
    SHAMN_INPUT_CHECK(v.has_value() || !required, t.origin(), ": missing required key '", key, "'");
    if (v) out = *v;
  }
  void integer(const std::string& key, int64_t& out, bool required = false) const {
    read(key, out, required, [&](const std::string& k) { return t.get_int(k); });
  }
  void real(const std::string& key, double& out, bool required = false) const {
    read(key, out, required, [&](const std::string& k) { return t.get_float(k); });
  }
  void text(const std::string& key, std::string& out, bool required = false) const {
    read(key, out, required, [&](const std::string& k) { return t.get_string(k); });
  }
  void boolean(const std::string& key, bool& out) const {
    read(key, out, false, [&](const std::string& k) { return t.get_bool(k); });
  }
  void texts(const std::string& key, std::vector<std::string>& out) const {
    read(key, out, false, [&](const std::string& k) { return t.get_string_array(k); });
  }
};

}  // namespace

std::vector<std::string> changed_settings(const RunConfig& before, const RunConfig& after) {
  // Through the parser, so floats read as their shortest exact form ("0.001"),
  // not the 17 digits to_toml() writes for a round trip.
  const auto old_settings = ConfigTable::parse(before.to_toml(), "checkpoint config").leaves("");
  const auto new_settings = ConfigTable::parse(after.to_toml(), "run config").leaves("");
  std::map<std::string, std::string> old_map, new_map;
  for (const auto& leaf : old_settings) old_map[leaf.key] = leaf.literal;
  for (const auto& leaf : new_settings) new_map[leaf.key] = leaf.literal;
  auto value = [](const std::map<std::string, std::string>& m, const std::string& key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("(unset)") : it->second;
  };
  std::vector<std::string> changes;
  auto add = [&](const std::string& key) {
    const std::string a = value(old_map, key), b = value(new_map, key);
    if (key != "train.out_dir" && a != b) changes.push_back(key + " " + a + " -> " + b);
  };
  for (const auto& leaf : old_settings) add(leaf.key);
  for (const auto& leaf : new_settings)
    if (!old_map.contains(leaf.key)) add(leaf.key);
  return changes;
}

void RunConfig::validate() const {
  model.validate();
  SHAMN_CONFIG_CHECK(!data.train_path.empty(), "data.train_path", "data.train_path is empty");
  SHAMN_CONFIG_CHECK(data.format == "llmc" || data.format == "u16", "data.format",
                     "data.format must be \"llmc\" (llm.c header) or \"u16\" (headerless "
                     "uint16), got \"",
                     data.format, "\"");
  SHAMN_CONFIG_CHECK(data.format != "u16" || model.vocab_size <= 65536, "data.format",
                     "data.format = \"u16\" holds tokens < 65536, but model.vocab_size is ",
                     model.vocab_size);
  auto positive = [](int64_t v, const char* key) {
    SHAMN_CONFIG_CHECK(v >= 1, key, key, " must be >= 1, got ", v);
  };
  auto non_negative = [](int64_t v, const char* key) {
    SHAMN_CONFIG_CHECK(v >= 0, key, key, " must be >= 0, got ", v);
  };
  positive(train.batch_size, "train.batch_size");
  positive(train.seq_len, "train.seq_len");
  positive(train.grad_accum, "train.grad_accum");
  // Each at most 2^20 (2^24 for seq_len): a step's token count cannot overflow.
  SHAMN_CONFIG_CHECK(train.batch_size <= (int64_t{1} << 20), "train.batch_size",
                     "train.batch_size must be <= 1048576, got ", train.batch_size);
  SHAMN_CONFIG_CHECK(train.seq_len <= (int64_t{1} << 24), "train.seq_len",
                     "train.seq_len must be <= 16777216, got ", train.seq_len);
  SHAMN_CONFIG_CHECK(train.grad_accum <= (int64_t{1} << 20), "train.grad_accum",
                     "train.grad_accum must be <= 1048576, got ", train.grad_accum);
  positive(train.max_steps, "train.max_steps");
  non_negative(train.seed, "train.seed");
  SHAMN_CONFIG_CHECK(!train.out_dir.empty(), "train.out_dir", "train.out_dir is empty");
  non_negative(train.checkpoint_every, "train.checkpoint_every");
  positive(train.keep_last, "train.keep_last");
  non_negative(train.eval_every, "train.eval_every");
  positive(train.eval_batches, "train.eval_batches");
  positive(train.max_bad_steps, "train.max_bad_steps");
  SHAMN_CONFIG_CHECK(parse_init_scheme(train.init).has_value(), "train.init",
                     "train.init must be \"normal\" or \"fan_in\", got \"", train.init, "\"");
  SHAMN_CONFIG_CHECK(train.init_std > 0 && train.init_std <= 1, "train.init_std",
                     "train.init_std must lie in (0, 1], got ", train.init_std);
  SHAMN_CONFIG_CHECK(!train.init_scale_residual || train.init == "normal", "train.init_scale_residual",
                     "train.init_scale_residual applies to train.init = \"normal\" (\"fan_in\" "
                     "scales the residual outputs always), got train.init = \"",
                     train.init, "\"");
  SHAMN_CONFIG_CHECK(train.precision == "f32" || train.precision == "bf16", "train.precision",
                     "train.precision must be \"f32\" or \"bf16\", got \"", train.precision, "\"");
  SHAMN_CONFIG_CHECK(train.bucket_mib >= 0.001 && train.bucket_mib <= 4096, "train.bucket_mib",
                     "train.bucket_mib must lie in [0.001, 4096], got ", train.bucket_mib);

  SHAMN_CONFIG_CHECK(optim.lr > 0 && optim.lr < 1e3, "optim.lr", "optim.lr must lie in (0, 1000), got ",
                     optim.lr);
  SHAMN_CONFIG_CHECK(optim.min_lr >= 0 && optim.min_lr <= optim.lr, "optim.min_lr",
                     "optim.min_lr must lie in [0, optim.lr = ", optim.lr, "], got ", optim.min_lr);
  SHAMN_CONFIG_CHECK(optim.warmup_steps >= 0 && optim.warmup_steps <= train.max_steps, "optim.warmup_steps",
                     "optim.warmup_steps must lie in [0, train.max_steps = ", train.max_steps, "], got ",
                     optim.warmup_steps);
  SHAMN_CONFIG_CHECK(optim.weight_decay >= 0 && std::isfinite(optim.weight_decay), "optim.weight_decay",
                     "optim.weight_decay must be >= 0 and finite, got ", optim.weight_decay);
  SHAMN_CONFIG_CHECK(optim.grad_clip >= 0 && std::isfinite(optim.grad_clip), "optim.grad_clip",
                     "optim.grad_clip must be >= 0 and finite (0 turns clipping off), got ", optim.grad_clip);
  SHAMN_CONFIG_CHECK(optim.beta1 >= 0 && optim.beta1 < 1, "optim.beta1",
                     "optim.beta1 must lie in [0, 1), got ", optim.beta1);
  SHAMN_CONFIG_CHECK(optim.beta2 >= 0 && optim.beta2 < 1, "optim.beta2",
                     "optim.beta2 must lie in [0, 1), got ", optim.beta2);
  SHAMN_CONFIG_CHECK(optim.eps > 0 && optim.eps < 1, "optim.eps", "optim.eps must lie in (0, 1), got ",
                     optim.eps);

  SHAMN_CONFIG_CHECK(lora.rank >= 0 && lora.rank <= kMaxLoraRank, "lora.rank", "lora.rank must lie in [0, ",
                     kMaxLoraRank, "] (0 turns adapters off), got ", lora.rank);
  if (lora.enabled()) {
    SHAMN_CONFIG_CHECK(std::isfinite(lora.alpha) && lora.alpha > 0, "lora.alpha",
                       "lora.alpha must be > 0, got ", lora.alpha);
    SHAMN_CONFIG_CHECK(!lora.targets.empty(), "lora.targets",
                       "lora.targets is empty: with lora.rank > 0 it must name the layers to adapt, e.g. "
                       "[\"layers.*.mixer.out\"]");
    SHAMN_CONFIG_CHECK(
        !train.init_from.empty(), "lora.rank",
        "lora.rank > 0 fine-tunes a trained base model, but train.init_from is empty; set it to "
        "the base checkpoint");
  }
  SHAMN_CONFIG_CHECK(lora.dropout >= 0 && lora.dropout < 1, "lora.dropout",
                     "lora.dropout must lie in [0, 1) (0 turns it off), got ", lora.dropout);
  select_lora_hosts(lora.targets, model);  // every pattern well-formed and matching, even when off

  positive(log.every, "log.every");
  SHAMN_CONFIG_CHECK(log.progress == "auto" || log.progress == "always" || log.progress == "never",
                     "log.progress", "log.progress must be \"auto\", \"always\" or \"never\", got \"",
                     log.progress, "\"");
}

const std::set<std::string>& RunConfig::known_keys() { return all_known_keys(); }

RunConfig RunConfig::from_table(const ConfigTable& t) {
  t.reject_unknown("", all_known_keys());
  RunConfig c;
  c.model = ModelConfig::from_table(t);
  for (const char* section : {"data", "train", "optim"})
    SHAMN_INPUT_CHECK(t.has(section), t.origin(), ": the config has no [", section, "] table");
  const Reader r{t};
  r.text("data.train_path", c.data.train_path, true);
  r.text("data.val_path", c.data.val_path);
  r.text("data.format", c.data.format);
  r.text("data.tokenizer", c.data.tokenizer);

  r.integer("train.batch_size", c.train.batch_size, true);
  r.integer("train.seq_len", c.train.seq_len, true);
  r.integer("train.grad_accum", c.train.grad_accum);
  r.integer("train.max_steps", c.train.max_steps, true);
  r.integer("train.seed", c.train.seed);
  r.text("train.out_dir", c.train.out_dir, true);
  r.integer("train.checkpoint_every", c.train.checkpoint_every);
  r.integer("train.keep_last", c.train.keep_last);
  r.integer("train.eval_every", c.train.eval_every);
  r.integer("train.eval_batches", c.train.eval_batches);
  r.integer("train.max_bad_steps", c.train.max_bad_steps);
  r.text("train.init_from", c.train.init_from);
  r.text("train.init", c.train.init);
  r.real("train.init_std", c.train.init_std);
  r.boolean("train.init_scale_residual", c.train.init_scale_residual);
  r.boolean("train.prefetch", c.train.prefetch);
  r.text("train.precision", c.train.precision);
  r.boolean("train.overlap_exchange", c.train.overlap_exchange);
  r.real("train.bucket_mib", c.train.bucket_mib);

  r.real("optim.lr", c.optim.lr, true);
  r.real("optim.min_lr", c.optim.min_lr);
  r.integer("optim.warmup_steps", c.optim.warmup_steps);
  r.real("optim.weight_decay", c.optim.weight_decay);
  r.real("optim.grad_clip", c.optim.grad_clip);
  r.real("optim.beta1", c.optim.beta1);
  r.real("optim.beta2", c.optim.beta2);
  r.real("optim.eps", c.optim.eps);

  r.integer("lora.rank", c.lora.rank);
  c.lora.alpha = static_cast<double>(c.lora.rank);  // the default: a scale of 1
  r.real("lora.alpha", c.lora.alpha);
  r.boolean("lora.rslora", c.lora.rslora);
  r.real("lora.dropout", c.lora.dropout);
  r.texts("lora.targets", c.lora.targets);

  r.integer("log.every", c.log.every);
  r.text("log.progress", c.log.progress);
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), t.where(e.key()) + ": " + e.what());
  }
  return c;
}

WeightInit RunConfig::weight_init() const {
  WeightInit w;
  w.scheme = *parse_init_scheme(train.init);  // validate() checked it
  w.std = train.init_std;
  w.scale_residual = train.init_scale_residual;
  return w;
}

RunConfig RunConfig::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  ConfigTable table = ConfigTable::parse_file(path);
  for (const std::string& o : overrides) table.set_from_text(o);
  return from_table(table);
}

RunConfig RunConfig::from_toml(const std::string& text, const std::string& origin) {
  return from_table(ConfigTable::parse(text, origin));
}

std::string RunConfig::to_toml() const {
  const auto f = toml_float;
  const auto s = toml_string;
  std::ostringstream out;
  out << model.to_toml() << "\n[data]\ntrain_path = " << s(data.train_path)
      << "\nval_path = " << s(data.val_path) << "\nformat = " << s(data.format)
      << "\ntokenizer = " << s(data.tokenizer) << "\n\n[train]\nbatch_size = " << train.batch_size
      << "\nseq_len = " << train.seq_len << "\ngrad_accum = " << train.grad_accum
      << "\nmax_steps = " << train.max_steps << "\nseed = " << train.seed
      << "\nout_dir = " << s(train.out_dir) << "\ncheckpoint_every = " << train.checkpoint_every
      << "\nkeep_last = " << train.keep_last << "\neval_every = " << train.eval_every
      << "\neval_batches = " << train.eval_batches << "\nmax_bad_steps = " << train.max_bad_steps
      << "\ninit_from = " << s(train.init_from) << "\ninit = " << s(train.init)
      << "\ninit_std = " << f(train.init_std) << "\nprefetch = " << (train.prefetch ? "true" : "false")
      << "\noverlap_exchange = " << (train.overlap_exchange ? "true" : "false") << "\nbucket_mib = "
      << f(train.bucket_mib)
      // Written only when not the default, as [lora] below.
      << (train.init_scale_residual ? "\ninit_scale_residual = true" : "")
      << (train.precision == "f32" ? "" : "\nprecision = " + s(train.precision))
      << "\n\n[optim]\nlr = " << f(optim.lr) << "\nmin_lr = " << f(optim.min_lr)
      << "\nwarmup_steps = " << optim.warmup_steps << "\nweight_decay = " << f(optim.weight_decay)
      << "\ngrad_clip = " << f(optim.grad_clip) << "\nbeta1 = " << f(optim.beta1)
      << "\nbeta2 = " << f(optim.beta2) << "\neps = " << f(optim.eps) << "\n";
  // Written only when used, so the resolved configs of runs without adapters (and
  // the sweep directories that compare them) stay as they were.
  if (lora.enabled() || !lora.targets.empty() || lora.dropout != 0) {
    out << "\n[lora]\nrank = " << lora.rank << "\nalpha = " << f(lora.alpha);
    if (lora.rslora) out << "\nrslora = true";  // absent: false, as in configs from before the key
    if (lora.dropout != 0) out << "\ndropout = " << f(lora.dropout);  // absent: 0, likewise
    out << "\ntargets = [";
    for (size_t i = 0; i < lora.targets.size(); ++i) out << (i ? ", " : "") << s(lora.targets[i]);
    out << "]\n";
  }
  out << "\n[log]\nevery = " << log.every << "\nprogress = " << s(log.progress) << "\n";
  return out.str();
}

}  // namespace shamn
