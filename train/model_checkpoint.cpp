#include "train/model_checkpoint.h"

#include <map>
#include <set>

#include "core/check.h"
#include "layers/lora.h"
#include "train/adapter_checkpoint.h"

namespace shamn {

namespace {
std::vector<NamedTensor> model_tensors(const Module& model, TensorSet set) {
  std::vector<NamedTensor> out;
  for (const NamedVar& p : model.named_parameters()) {
    const bool adapter = is_lora_parameter(p.name);
    if (set == TensorSet::all || adapter == (set == TensorSet::adapters))
      out.push_back({p.name, p.var.value()});
  }
  if (set != TensorSet::adapters)
    for (const NamedTensor& b : model.named_buffers()) out.push_back(b);
  return out;
}
}  // namespace

void write_model_tensors(Hdf5Writer& writer, const Module& model, TensorSet set) {
  for (const NamedTensor& t : model_tensors(model, set))
    writer.write_tensor(checkpoint_path("/model", t.name), t.tensor);
}

void save_model_checkpoint(const std::string& path, const Module& model, const std::string& config_toml,
                           int64_t step) {
  Hdf5Writer writer(path, "model");
  write_model_tensors(writer, model);
  writer.set_string_attribute("config", config_toml);
  writer.set_int_attribute("format_version", kCheckpointFormatVersion);
  writer.set_int_attribute("step", step);
  writer.commit();
}

ModelConfig read_checkpoint_config(const Hdf5Reader& reader) {
  SHAMN_INPUT_CHECK(reader.has_attribute("format_version"), "'", reader.path(),
                    "' is not a shamn checkpoint (no format_version attribute)");
  const int64_t version = reader.int_attribute("format_version");
  SHAMN_INPUT_CHECK(version == kCheckpointFormatVersion, "'", reader.path(),
                    "' has checkpoint format_version ", version, "; this shamn reads version ",
                    kCheckpointFormatVersion);
  return ModelConfig::from_toml(reader.string_attribute("config"), reader.path() + " (attribute config)");
}

void load_model_tensors(const Hdf5Reader& reader, Module& model, TensorSet set) {
  SHAMN_INPUT_CHECK(
      set == TensorSet::adapters || !reader.has_attribute(kAdapterBaseAttribute), "'", reader.path(),
      "' is a LoRA adapter checkpoint: it holds the adapters only, not a whole model. Its "
      "base is the checkpoint its config names as train.init_from (",
      reader.has_attribute(kAdapterBaseFileAttribute) ? reader.string_attribute(kAdapterBaseFileAttribute)
                                                      : std::string("not recorded"),
      "); resume the adapter run with shamn train --resume");
  const std::vector<NamedTensor> wanted = model_tensors(model, set);
  std::set<std::string> expected;
  for (const NamedTensor& t : wanted) expected.insert(checkpoint_path("/model", t.name));
  for (const std::string& path : reader.datasets("/model"))
    SHAMN_INPUT_CHECK(expected.count(path), "'", reader.path(), "' has tensor '", dotted_name("/model", path),
                      "' that this model does not have");
  std::vector<Tensor> loaded;
  for (const NamedTensor& t : wanted) {
    const std::string path = checkpoint_path("/model", t.name);
    SHAMN_INPUT_CHECK(reader.has_dataset(path), "'", reader.path(), "' is missing tensor '", t.name, "' (",
                      path, ")");
    const Shape shape = reader.dataset_shape(path);
    SHAMN_INPUT_CHECK(shape == t.tensor.shape(), "'", reader.path(), "': tensor '", t.name, "' has shape ",
                      shape_str(shape), " but the model needs ", shape_str(t.tensor.shape()));
    Tensor value = reader.read_tensor(path);
    SHAMN_INPUT_CHECK(value.dtype() == t.tensor.dtype(), "'", reader.path(), "': tensor '", t.name, "' is ",
                      dtype_name(value.dtype()), " but the model needs ", dtype_name(t.tensor.dtype()));
    loaded.push_back(std::move(value));
  }
  for (size_t i = 0; i < wanted.size(); ++i) wanted[i].tensor.copy_from(loaded[i]);
}

}  // namespace shamn
