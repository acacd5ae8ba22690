#include "train/adapter_checkpoint.h"

#include <cstdio>
#include <sstream>

#include "core/check.h"
#include "core/lora_scale.h"

namespace shamn {

namespace {
std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

std::string joined(const std::vector<std::string>& lines, const char* separator) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? separator : "") + lines[i];
  return out;
}
}  // namespace

void write_adapter_identity(Hdf5Writer& writer, const AdapterIdentity& id) {
  writer.set_int_attribute(kAdapterBaseAttribute, static_cast<int64_t>(id.base_crc32));
  writer.set_string_attribute(kAdapterBaseFileAttribute, id.base_file);
  writer.set_int_attribute("lora_rank", id.lora.rank);
  writer.set_float_attribute("lora_alpha", id.lora.alpha);
  writer.set_int_attribute("lora_rslora", id.lora.rslora ? 1 : 0);
  writer.set_string_attribute("lora_targets", joined(id.lora.targets, "\n"));
}

bool is_adapter_checkpoint(const Hdf5Reader& reader) { return reader.has_attribute(kAdapterBaseAttribute); }

AdapterIdentity read_adapter_identity(const Hdf5Reader& reader) {
  SHAMN_INPUT_CHECK(is_adapter_checkpoint(reader), "'", reader.path(),
                    "' is not a LoRA adapter checkpoint (no ", kAdapterBaseAttribute, " attribute)");
  AdapterIdentity id;
  const int64_t crc = reader.int_attribute(kAdapterBaseAttribute);
  SHAMN_INPUT_CHECK(crc >= 0 && crc <= 0xffffffffll, "'", reader.path(), "': attribute ",
                    kAdapterBaseAttribute, " = ", crc, " is not a CRC-32");
  id.base_crc32 = static_cast<uint32_t>(crc);
  id.base_file = reader.string_attribute(kAdapterBaseFileAttribute);
  id.lora.rank = reader.int_attribute("lora_rank");
  id.lora.alpha = reader.float_attribute("lora_alpha");
  // Absent in checkpoints from before rsLoRA: alpha / rank.
  if (reader.has_attribute("lora_rslora")) {
    const int64_t rs = reader.int_attribute("lora_rslora");
    SHAMN_INPUT_CHECK(rs == 0 || rs == 1, "'", reader.path(), "': attribute lora_rslora = ", rs,
                      " is neither 0 nor 1");
    id.lora.rslora = rs == 1;
  }
  std::istringstream targets(reader.string_attribute("lora_targets"));
  for (std::string line; std::getline(targets, line);) id.lora.targets.push_back(line);
  return id;
}

void check_adapter_checkpoint(const Hdf5Reader& adapter, const AdapterIdentity& expected) {
  const AdapterIdentity saved = read_adapter_identity(adapter);
  SHAMN_INPUT_CHECK(saved.base_crc32 == expected.base_crc32, "the LoRA adapters in '", adapter.path(),
                    "' were trained on another base model than '", expected.base_file, "' (base checksum ",
                    hex(saved.base_crc32), ", recorded base file '", saved.base_file, "'; '",
                    expected.base_file, "' has checksum ", hex(expected.base_crc32),
                    "). An adapter works only beside the exact base it was trained on");
  SHAMN_INPUT_CHECK(
      saved.lora.rank == expected.lora.rank && saved.lora.alpha == expected.lora.alpha &&
          saved.lora.rslora == expected.lora.rslora && saved.lora.targets == expected.lora.targets,
      "'", adapter.path(), "' holds adapters of rank ", saved.lora.rank, ", alpha ", saved.lora.alpha,
      lora_scale_note(saved.lora.rslora), " on [", joined(saved.lora.targets, ", "),
      "]; the config asks for rank ", expected.lora.rank, ", alpha ", expected.lora.alpha,
      lora_scale_note(expected.lora.rslora), " on [", joined(expected.lora.targets, ", "), "]");
}

}  // namespace shamn
