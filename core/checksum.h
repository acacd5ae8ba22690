#pragma once
// CRC-32 (zlib's: the one gzip and PNG use) of a byte range. Checkpoints and
// model files carry it per tensor so a flipped byte is caught on load.
#include <cstddef>
#include <cstdint>

namespace shamn {

uint32_t crc32_bytes(const void* data, size_t bytes);
// Continues `crc` (a crc32_bytes result, or 0 for none) over more bytes:
// crc32_update(crc32_bytes(a), b) == crc32_bytes(a followed by b).
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

}  // namespace shamn
