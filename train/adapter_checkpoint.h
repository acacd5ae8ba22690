#pragma once
// LoRA adapter checkpoints. A run with lora.rank > 0 trains adapters on a frozen
// base (train.init_from), and its checkpoints (ckpt_<step>.h5, best.h5) hold the
// adapters only: /model/<host>/lora_a and lora_b in the SPEC's layout, their
// AdamW moments under /optim/, the usual root attributes (config, step, the
// training state), and the base's identity and the adapter settings:
//   lora_base_crc32  the base's checksum (layers/lora.h: base_checksum)
//   lora_base_file   the base checkpoint's path as train.init_from gave it
//   lora_rank, lora_alpha, lora_targets (the patterns, one per line),
//   lora_rslora      1: the term is scaled by alpha / sqrt(rank) (absent or 0: alpha / rank)
// The base's weights are not copied: an adapter is only usable beside the base
// it was trained on, and pairing it with any other is refused.
#include <cstdint>
#include <string>

#include "core/hdf5_file.h"
#include "layers/lora.h"

namespace shamn {

inline constexpr const char* kAdapterBaseAttribute = "lora_base_crc32";
inline constexpr const char* kAdapterBaseFileAttribute = "lora_base_file";

// What an adapter was trained on and with.
struct AdapterIdentity {
  uint32_t base_crc32 = 0;
  std::string base_file;
  LoraOptions lora;
};

void write_adapter_identity(Hdf5Writer& writer, const AdapterIdentity& identity);
bool is_adapter_checkpoint(const Hdf5Reader& reader);
AdapterIdentity read_adapter_identity(const Hdf5Reader& reader);

// Refuses an adapter checkpoint trained on another base than `expected` (the
// error names both files and both checksums) or with other adapter settings.
void check_adapter_checkpoint(const Hdf5Reader& adapter, const AdapterIdentity& expected);

}  // namespace shamn
