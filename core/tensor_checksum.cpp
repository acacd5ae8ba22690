#include "core/tensor_checksum.h"

#include "core/checksum.h"

namespace shamn {

uint32_t named_tensors_crc32(const std::map<std::string, Tensor>& tensors) {
  uint32_t crc = 0;
  for (const auto& [name, t] : tensors) {
    const std::string dtype = dtype_name(t.dtype());
    crc = crc32_update(crc, name.c_str(), name.size() + 1);
    crc = crc32_update(crc, dtype.c_str(), dtype.size() + 1);
    for (int64_t d : t.shape()) {
      unsigned char le[8];
      for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(static_cast<uint64_t>(d) >> (8 * k));
      crc = crc32_update(crc, le, sizeof(le));
    }
    crc = crc32_update(crc, t.raw_data(), t.nbytes());
  }
  return crc;
}

}  // namespace shamn
