#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "core/check.h"

namespace shamn {

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  SHAMN_INPUT_CHECK(fd >= 0, "cannot open token file '", path, "'");
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t file_bytes = st.st_size;
  if (file_bytes >= kTokenHeaderBytes) {
    void* p = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      map_ = static_cast<const uint8_t*>(p);
      map_bytes_ = static_cast<size_t>(file_bytes);
    }
  }
  ::close(fd);
  SHAMN_INPUT_CHECK(file_bytes >= kTokenHeaderBytes, "token file '", path, "' is ", file_bytes,
                    " bytes, shorter than its 1024-byte header");
  SHAMN_INPUT_CHECK(map_ != nullptr, "cannot mmap token file '", path, "'");
  int32_t header[3];
  std::memcpy(header, map_, sizeof(header));
  if (header[0] == kTokenMagicU16) {
    SHAMN_INPUT_CHECK(header[1] == 1, "token file '", path, "': version ", header[1],
                      " at offset 4, expected 1 for uint16 tokens");
    token_bytes_ = 2;
  } else if (header[0] == kTokenMagicU32) {
    SHAMN_INPUT_CHECK(header[1] == 7, "token file '", path, "': version ", header[1],
                      " at offset 4, expected 7 for uint32 tokens");
    token_bytes_ = 4;
  } else {
    SHAMN_INPUT_CHECK(false, "token file '", path, "': bad magic ", header[0],
                      " at offset 0 (expected ", kTokenMagicU16, " or ", kTokenMagicU32,
                      "; is this an llm.c token file?)");
  }
  count_ = header[2];
  SHAMN_INPUT_CHECK(count_ >= 0 && kTokenHeaderBytes + count_ * token_bytes_ == file_bytes,
                    "token file '", path, "': header (offset 8) says ", header[2], " tokens of ",
                    token_bytes_, " bytes, but the file holds ", file_bytes - kTokenHeaderBytes,
                    " bytes after the header (truncated?)");
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

uint32_t TokenFile::token(int64_t i) const {
  const uint8_t* p = map_ + kTokenHeaderBytes + i * token_bytes_;
  if (token_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Tensor TokenFile::window(int64_t begin, int64_t n, int64_t vocab) const {
  SHAMN_INPUT_CHECK(begin >= 0 && n >= 0 && begin + n <= count_, "token file '", path_,
                    "' has ", count_, " tokens; cannot read [", begin, ", ", begin + n, ")");
  Tensor out = Tensor::empty({n}, DType::i32);
  int32_t* o = out.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t t = token(begin + i);
    SHAMN_INPUT_CHECK(t < static_cast<uint64_t>(vocab), "token file '", path_, "': token ", t,
                      " at index ", begin + i, " (byte offset ",
                      kTokenHeaderBytes + (begin + i) * token_bytes_, ") is >= vocab_size ", vocab);
    o[i] = static_cast<int32_t>(t);
  }
  return out;
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens) {
  bool wide = false;
  for (uint32_t t : tokens) wide |= t > 0xFFFF;
  int32_t header[256] = {};
  header[0] = wide ? kTokenMagicU32 : kTokenMagicU16;
  header[1] = wide ? 7 : 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  SHAMN_INPUT_CHECK(out.good(), "cannot write token file '", path, "'");
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  for (uint32_t t : tokens) {
    if (wide) {
      out.write(reinterpret_cast<const char*>(&t), 4);
    } else {
      const uint16_t v = static_cast<uint16_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
  SHAMN_INPUT_CHECK(out.good(), "writing token file '", path, "' failed");
}

}  // namespace shamn
