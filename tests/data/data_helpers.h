#pragma once
// Temporary directories and hand-made token files for the data tests.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/scratch_dir.h"

namespace shamn::test {

// An empty directory of this process's own (tests/scratch_dir.h).
inline std::filesystem::path data_temp_dir(const std::string& name) { return scratch_dir("data/" + name); }

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// An llm.c header (magic, version, count) followed by `token_bytes`-wide tokens.
inline std::vector<uint8_t> llmc_bytes(int32_t magic, int32_t version, int32_t count,
                                       const std::vector<uint32_t>& tokens, int token_bytes = 2) {
  std::vector<uint8_t> bytes(1024, 0);
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memcpy(bytes.data() + 8, &count, 4);
  for (uint32_t t : tokens) {
    uint8_t raw[4];
    std::memcpy(raw, &t, 4);  // little-endian: the low bytes first
    bytes.insert(bytes.end(), raw, raw + token_bytes);
  }
  return bytes;
}

}  // namespace shamn::test
