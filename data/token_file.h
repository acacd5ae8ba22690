#pragma once
// Token files in llm.c's format, read through mmap (no copy into RAM):
// a 1024-byte header of 256 int32 (magic 20240520 + version 1 for uint16 tokens,
// magic 20240801 + version 7 for uint32 tokens; header[2] = token count), then
// the tokens.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace shamn {

inline constexpr int32_t kTokenMagicU16 = 20240520;
inline constexpr int32_t kTokenMagicU32 = 20240801;
inline constexpr int64_t kTokenHeaderBytes = 1024;

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);  // checks magic, version, size
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }
  int bytes_per_token() const { return token_bytes_; }
  uint32_t token(int64_t i) const;
  // Copies tokens [begin, begin + n) into an int32 tensor, checking each < vocab
  // (errors name the file and the token's offset).
  Tensor window(int64_t begin, int64_t n, int64_t vocab) const;

 private:
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t count_ = 0;
  int token_bytes_ = 2;
};

// Writes tokens in the same format (uint16 when every token fits, else uint32).
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace shamn
