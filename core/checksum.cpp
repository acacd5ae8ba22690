#include "core/checksum.h"

#include <algorithm>

#include <zlib.h>

namespace shamn {

uint32_t crc32_bytes(const void* data, size_t bytes) { return crc32_update(0, data, bytes); }

uint32_t crc32_update(uint32_t start, const void* data, size_t bytes) {
  uLong crc = start;
  const auto* p = static_cast<const Bytef*>(data);
  // zlib takes uInt lengths: feed big ranges in 1 GiB pieces.
  for (size_t left = bytes; left > 0;) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace shamn
