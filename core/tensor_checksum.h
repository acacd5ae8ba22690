#pragma once
// The identity of a set of named tensors (a model's weights): CRC-32 over the
// tensors in name order, each as its dotted name, a NUL, its dtype name, a
// NUL, its dims as little-endian int64 and its bytes. A LoRA adapter records
// its base's, and the runtime compares it with the one `shamn export` stores in
// the base's .shq file (ShqHeader::source_id).
#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace shamn {

uint32_t named_tensors_crc32(const std::map<std::string, Tensor>& tensors);

}  // namespace shamn
