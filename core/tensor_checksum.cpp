#include "core/tensor_checksum.h"

#include <zlib.h>

namespace shamn {

uint32_t named_tensors_crc32(const std::map<std::string, Tensor>& tensors) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  const auto add = [&crc](const void* p, size_t n) { crc = crc32_z(crc, static_cast<const Bytef*>(p), n); };
  for (const auto& [name, t] : tensors) {
    const std::string dtype = dtype_name(t.dtype());
    add(name.c_str(), name.size() + 1);
    add(dtype.c_str(), dtype.size() + 1);
    for (int64_t d : t.shape()) {
      unsigned char le[8];
      for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(static_cast<uint64_t>(d) >> (8 * k));
      add(le, sizeof(le));
    }
    add(t.raw_data(), t.nbytes());
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace shamn
