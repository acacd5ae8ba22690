#pragma once
// Recomputes the checksums of a (possibly corrupted) .shq image in place, so
// that a test's corruption, or a fuzzer's mutation, reaches the check behind
// the CRCs instead of stopping at the first checksum. Regions that lie outside
// the image are left alone: the loader must reject those on its own.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/checksum.h"
#include "infer/shq_format.h"

namespace shamn::testing {

inline bool shq_range_ok(uint64_t offset, uint64_t bytes, size_t size) {
  uint64_t end = 0;
  return !__builtin_add_overflow(offset, bytes, &end) && end <= size;
}

// tensor_crcs: also reseal every in-range tensor entry's data CRC (the fuzzer
// wants this; a test of the data checksum does not).
inline void shq_reseal(uint8_t* image, size_t size, bool tensor_crcs) {
  if (size < sizeof(ShqHeader)) return;
  ShqHeader h;
  std::memcpy(&h, image, sizeof(h));
  const uint64_t dir_bytes = uint64_t{h.tensor_count} * sizeof(ShqTensorEntry);
  if (shq_range_ok(h.directory_offset, dir_bytes, size)) {
    for (uint64_t i = 0; tensor_crcs && i < h.tensor_count; ++i) {
      uint8_t* at = image + h.directory_offset + i * sizeof(ShqTensorEntry);
      ShqTensorEntry e;
      std::memcpy(&e, at, sizeof(e));
      if (!shq_range_ok(e.offset, e.bytes, size)) continue;
      e.crc = crc32_bytes(image + e.offset, e.bytes);
      std::memcpy(at, &e, sizeof(e));
    }
    h.directory_crc = crc32_bytes(image + h.directory_offset, dir_bytes);
  }
  if (shq_range_ok(h.config_offset, h.config_bytes, size))
    h.config_crc = crc32_bytes(image + h.config_offset, h.config_bytes);
  if (shq_range_ok(h.tokenizer_offset, h.tokenizer_bytes, size))
    h.tokenizer_crc = crc32_bytes(image + h.tokenizer_offset, h.tokenizer_bytes);
  std::memcpy(image, &h, sizeof(h));
  h.header_crc = crc32_bytes(image, offsetof(ShqHeader, header_crc));
  std::memcpy(image, &h, sizeof(h));
}

inline void shq_reseal(std::vector<uint8_t>& image, bool tensor_crcs) {
  shq_reseal(image.data(), image.size(), tensor_crcs);
}

}  // namespace shamn::testing
