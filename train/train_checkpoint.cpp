#include "train/train_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/hdf5_file.h"
#include "train/model_checkpoint.h"

namespace shamn {

namespace fs = std::filesystem;

namespace {

constexpr const char* kUnreachedAttribute = "optim_unreached";

// The parameters no gradient had reached when the checkpoint was written (AdamW
// updates the others every step, reached or not). Checkpoints from before stop
// 80 lack the attribute: there a parameter counts as unreached when both its
// moments are all zero, which is exact unless every gradient it had was zero.
std::vector<std::string> unreached_parameters(const Hdf5Reader& reader, const AdamW& optimizer,
                                              const std::map<std::string, const Tensor*>& moments) {
  std::set<std::string> params;
  for (const ParamGroup& g : optimizer.groups())
    for (const NamedVar& p : g.params) params.insert(p.name);
  std::vector<std::string> out;
  if (reader.has_attribute(kUnreachedAttribute)) {
    std::istringstream lines(reader.string_attribute(kUnreachedAttribute));
    for (std::string name; std::getline(lines, name);) {
      SHAMN_INPUT_CHECK(params.count(name), "'", reader.path(), "': attribute '", kUnreachedAttribute,
                        "' names '", name, "', which is not a trained parameter of this run");
      out.push_back(name);
    }
    return out;
  }
  const auto all_zero = [](const Tensor& t) {
    const float* x = t.data<float>();
    return std::all_of(x, x + t.numel(), [](float v) { return v == 0.0f; });
  };
  for (const std::string& name : params)
    if (all_zero(*moments.at("m." + name)) && all_zero(*moments.at("v." + name))) out.push_back(name);
  return out;
}

constexpr const char* kLateAttribute = "optim_late_updates";

// The reached parameters whose AdamW update count is not the step count (first
// reached after step 1): lines "NAME COUNT". Checkpoints from before stop 82 lack
// it; there every reached parameter's count was the step count (one t for all).
std::vector<std::pair<std::string, int64_t>> late_parameters(const Hdf5Reader& reader, const AdamW& optimizer,
                                                             int64_t optim_step,
                                                             const std::vector<std::string>& unreached) {
  std::set<std::string> reached;
  for (const ParamGroup& g : optimizer.groups())
    for (const NamedVar& p : g.params) reached.insert(p.name);
  for (const std::string& name : unreached) reached.erase(name);
  std::vector<std::pair<std::string, int64_t>> out;
  if (!reader.has_attribute(kLateAttribute)) return out;
  std::istringstream lines(reader.string_attribute(kLateAttribute));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string name, rest;
    int64_t count = 0;
    const bool parsed = static_cast<bool>(fields >> name >> count) && !(fields >> rest);
    SHAMN_INPUT_CHECK(parsed && reached.count(name) && count >= 1 && count < optim_step, "'", reader.path(),
                      "': attribute '", kLateAttribute, "' line '", line,
                      "' is not 'NAME COUNT' for a reached parameter of this run with 1 to ", optim_step - 1,
                      " updates");
    reached.erase(name);  // once
    out.emplace_back(name, count);
  }
  return out;
}

}  // namespace

void save_train_checkpoint(const std::string& path, const Module& model, const AdamW& optimizer,
                           const std::string& config_toml, const TrainState& state,
                           const AdapterIdentity* adapter) {
  Hdf5Writer writer(path, "checkpoint");
  write_model_tensors(writer, model, adapter ? TensorSet::adapters : TensorSet::all);
  if (adapter) write_adapter_identity(writer, *adapter);
  for (const NamedTensor& t : optimizer.state_tensors())
    writer.write_tensor(checkpoint_path("/optim", t.name), t.tensor);
  writer.set_string_attribute("config", config_toml);
  writer.set_int_attribute("format_version", kCheckpointFormatVersion);
  writer.set_int_attribute("step", state.step);
  writer.set_int_attribute("optim_step", state.optim_step);
  std::string unreached;
  for (const std::string& name : optimizer.unreached()) unreached += name + "\n";
  writer.set_string_attribute(kUnreachedAttribute, unreached);
  std::string late;
  for (const auto& [name, count] : optimizer.late_updates())
    late += name + " " + std::to_string(count) + "\n";
  writer.set_string_attribute(kLateAttribute, late);
  writer.set_int_attribute("data_seed", static_cast<int64_t>(state.data_seed));
  writer.set_int_attribute("data_position", static_cast<int64_t>(state.data_position));
  writer.set_float_attribute("best_val_loss", state.best_val_loss);
  writer.set_int_attribute("bad_steps", state.bad_steps);
  writer.set_int_attribute("tokens_seen", state.tokens_seen);
  writer.set_float_attribute("elapsed_s", state.elapsed_s);
  writer.commit();
}

bool is_train_checkpoint(const std::string& path) {
  const Hdf5Reader reader(path);
  return reader.has_attribute("optim_step") && !reader.datasets("/optim").empty();
}

TrainState load_train_checkpoint(const std::string& path, Module& model, AdamW& optimizer,
                                 const AdapterIdentity* adapter) {
  const Hdf5Reader reader(path);
  SHAMN_INPUT_CHECK(adapter || !is_adapter_checkpoint(reader), "'", path,
                    "' is a LoRA adapter checkpoint (adapters only); it resumes only a run with its "
                    "[lora] settings and base (train.init_from = '",
                    reader.has_attribute(kAdapterBaseFileAttribute)
                        ? reader.string_attribute(kAdapterBaseFileAttribute)
                        : std::string("?"),
                    "')");
  if (adapter) {
    SHAMN_INPUT_CHECK(is_adapter_checkpoint(reader), "'", path,
                      "' holds a whole model, not LoRA adapters; this run (lora.rank = ", adapter->lora.rank,
                      ") resumes from adapter checkpoints only");
    check_adapter_checkpoint(reader, *adapter);
  }
  SHAMN_INPUT_CHECK(reader.has_attribute("optim_step"), "'", path,
                    "' holds no optimizer state (a model-only checkpoint): it can start a new "
                    "run (train.init_from) but not resume one");
  TrainState s;
  s.step = reader.int_attribute("step");
  s.optim_step = reader.int_attribute("optim_step");
  s.data_seed = static_cast<uint64_t>(reader.int_attribute("data_seed"));
  s.data_position = static_cast<uint64_t>(reader.int_attribute("data_position"));
  s.best_val_loss = reader.float_attribute("best_val_loss");
  s.bad_steps = reader.int_attribute("bad_steps");
  s.tokens_seen = reader.int_attribute("tokens_seen");
  s.elapsed_s = reader.float_attribute("elapsed_s");
  // The checksums cover the tensors, not these: a hand-edited or damaged header
  // is refused here, naming it, before anything is copied.
  const auto attribute_in_range = [&](bool ok, const char* name, auto value, const std::string& want) {
    SHAMN_INPUT_CHECK(ok, "'", path, "': attribute '", name, "' = ", value, " is out of range (", want, ")");
  };
  attribute_in_range(s.step >= 0, "step", s.step, ">= 0");
  attribute_in_range(s.optim_step >= 0 && s.optim_step <= s.step, "optim_step", s.optim_step,
                     "0 to the step, " + std::to_string(s.step));
  attribute_in_range(s.bad_steps >= 0, "bad_steps", s.bad_steps, ">= 0");
  attribute_in_range(s.tokens_seen >= 0, "tokens_seen", s.tokens_seen, ">= 0");
  attribute_in_range(std::isfinite(s.elapsed_s) && s.elapsed_s >= 0, "elapsed_s", s.elapsed_s,
                     "finite, >= 0");
  attribute_in_range(!std::isnan(s.best_val_loss), "best_val_loss", s.best_val_loss, "a number or inf");
  std::vector<NamedTensor> moments;
  for (const std::string& p : reader.datasets("/optim"))
    moments.push_back({dotted_name("/optim", p), reader.read_tensor(p)});
  // Check the moments before anything is copied, so a bad file changes neither
  // the model nor the optimizer.
  std::map<std::string, const Tensor*> by_name;
  for (const NamedTensor& t : moments) by_name[t.name] = &t.tensor;
  size_t expected = 0;
  for (const ParamGroup& g : optimizer.groups()) {
    for (const NamedVar& p : g.params) {
      for (const char* moment : {"m.", "v."}) {
        const std::string name = moment + p.name;
        const auto it = by_name.find(name);
        SHAMN_INPUT_CHECK(it != by_name.end(), "'", path, "' is missing optimizer tensor '", name, "' (",
                          checkpoint_path("/optim", name), ")");
        SHAMN_INPUT_CHECK(it->second->shape() == p.var.shape() && it->second->dtype() == DType::f32, "'",
                          path, "': optimizer tensor '", name, "' is ", it->second->str(), " but parameter '",
                          p.name, "' is ", p.var.value().str());
        ++expected;
      }
    }
  }
  SHAMN_INPUT_CHECK(moments.size() == expected, "'", path, "' has ", moments.size() - expected,
                    " optimizer tensors that match no parameter of this model");
  const std::vector<std::string> unreached = unreached_parameters(reader, optimizer, by_name);
  const std::vector<std::pair<std::string, int64_t>> late =
      late_parameters(reader, optimizer, s.optim_step, unreached);
  load_model_tensors(reader, model, adapter ? TensorSet::adapters : TensorSet::all);
  optimizer.load_state(s.optim_step, moments, unreached, late);
  return s;
}

std::string checkpoint_file(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt_%08lld.h5", static_cast<long long>(step));
  return (fs::path(run_dir) / name).string();
}

std::string best_checkpoint_file(const std::string& run_dir) {
  return (fs::path(run_dir) / "best.h5").string();
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  static const std::regex pattern(R"(ckpt_\d{8,}\.h5)");
  std::vector<std::string> out;
  if (!fs::is_directory(run_dir)) return out;
  for (const auto& entry : fs::directory_iterator(run_dir))
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), pattern))
      out.push_back(entry.path().string());
  // Same digit count sorts by step; longer names are later steps.
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return out;
}

namespace {
// The order list_checkpoints sorts in: same digit count by name, longer names later.
bool later_checkpoint_name(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() > b.size() : a > b;
}
}  // namespace

std::string step_name_best_lacks(const std::string& run_dir) {
  const std::string best = best_checkpoint_file(run_dir);
  if (!fs::is_regular_file(best)) return "";
  int64_t step = 0;
  try {
    const Hdf5Reader reader(best);
    if (!reader.has_attribute("optim_step")) return "";  // not a training checkpoint
    step = reader.int_attribute("step");
  } catch (const InputError&) {
    return "";  // a damaged best.h5 is nothing to resume from
  }
  const std::string name = checkpoint_file(run_dir, step);
  const std::vector<std::string> all = list_checkpoints(run_dir);
  if (!all.empty() && !later_checkpoint_name(name, all.back())) return "";
  return name;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep, const std::string& written) {
  const std::vector<std::string> all = list_checkpoints(run_dir);
  const std::string name = fs::path(written).filename().string();
  const auto at = std::find_if(all.begin(), all.end(),
                               [&](const std::string& p) { return fs::path(p).filename() == name; });
  SHAMN_CHECK(at != all.end(), "prune_checkpoints: '", written, "' is not a checkpoint of ", run_dir);
  // Only the checkpoints up to the one just written count: a later step's file
  // (one a resume could not load) is not newer work, and must not push the
  // written one or its predecessors out.
  const size_t upto = static_cast<size_t>(at - all.begin()) + 1;
  for (size_t i = 0; i + static_cast<size_t>(keep) < upto; ++i) fs::remove(all[i]);
}

std::string set_aside_damaged_checkpoint(const std::string& path) {
  std::string aside = path + ".damaged";
  for (int n = 1; fs::exists(aside); ++n) aside = path + ".damaged." + std::to_string(n);
  std::error_code ec;
  fs::rename(path, aside, ec);
  SHAMN_INPUT_CHECK(!ec, "cannot move the damaged checkpoint '", path, "' aside to '", aside,
                    "': ", ec.message());
  return aside;
}

int remove_stale_temp_files(const std::string& run_dir) {
  int removed = 0;
  if (!fs::is_directory(run_dir)) return 0;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    static const std::regex temp(R"(.*\.tmp\.\d+)");
    if (entry.is_regular_file() && std::regex_match(name, temp)) {
      fs::remove(entry.path());
      ++removed;
    }
  }
  return removed;
}

}  // namespace shamn
