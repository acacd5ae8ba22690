#include "infer/shq_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include "core/aligned.h"
#include "core/check.h"
#include "core/checksum.h"
#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"

namespace shamn {

const char* shq_dtype_name(ShqDType dtype) {
  switch (dtype) {
    case ShqDType::f32:
      return "f32";
    case ShqDType::i32:
      return "i32";
    case ShqDType::q8_0:
      return "q8_0";
    case ShqDType::q4_0:
      return "q4_0";
    case ShqDType::q8_0x16:
      return "q8_0x16";
    case ShqDType::q4_0x16:
      return "q4_0x16";
  }
  return "?";
}

const char* shq_quant_name(ShqQuant quant) {
  switch (quant) {
    case ShqQuant::f32:
      return "f32";
    case ShqQuant::int8:
      return "int8";
    case ShqQuant::int4:
      return "int4";
  }
  return "?";
}

namespace {

// No tensor may claim more elements than this: far above any model, far below overflow.
constexpr uint64_t kMaxElements = uint64_t{1} << 40;
constexpr uint32_t kMaxTensors = 1u << 20;

bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// [offset, offset + bytes) inside [0, size).
bool in_file(uint64_t offset, uint64_t bytes, uint64_t size) {
  uint64_t end = 0;
  return add_ok(offset, bytes, &end) && end <= size;
}

// The byte offset (within the tensor) of its first non-finite f32 value or block
// scale, or -1. A NaN weight or scale has no defined path through the int8
// kernels: each kernel level would give its own numbers.
int64_t first_non_finite(ShqDType dtype, const uint8_t* data, uint64_t bytes) {
  uint64_t stride = 0, floats = 0;  // `floats` f32 values at the start of every `stride` bytes
  switch (dtype) {
    case ShqDType::f32:
      stride = 4, floats = 1;
      break;
    case ShqDType::i32:
      return -1;
    case ShqDType::q8_0:
      stride = sizeof(BlockQ8), floats = 1;
      break;
    case ShqDType::q4_0:
      stride = sizeof(BlockQ4), floats = 1;
      break;
    case ShqDType::q8_0x16:
      stride = sizeof(TileQ8), floats = kTileRows;
      break;
    case ShqDType::q4_0x16:
      stride = sizeof(TileQ4), floats = kTileRows;
      break;
  }
  for (uint64_t at = 0; at + stride <= bytes; at += stride)
    for (uint64_t k = 0; k < floats; ++k) {
      float v;
      std::memcpy(&v, data + at + 4 * k, sizeof(v));
      if (!std::isfinite(v)) return static_cast<int64_t>(at + 4 * k);
    }
  return -1;
}

}  // namespace

bool shq_tensor_bytes(ShqDType dtype, const Shape& shape, uint64_t* bytes) {
  if (shape.empty()) return false;
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d <= 0 || !mul_ok(numel, static_cast<uint64_t>(d), &numel) || numel > kMaxElements) return false;
  }
  const uint64_t cols = static_cast<uint64_t>(shape.back());
  const uint64_t rows = numel / cols;
  const uint64_t blocks = (cols + kQuantBlock - 1) / kQuantBlock;
  switch (dtype) {
    case ShqDType::f32:
    case ShqDType::i32:
      return mul_ok(numel, 4, bytes);
    case ShqDType::q8_0:
      return mul_ok(rows, blocks, bytes) && mul_ok(*bytes, sizeof(BlockQ8), bytes);
    case ShqDType::q4_0:
      return mul_ok(rows, blocks, bytes) && mul_ok(*bytes, sizeof(BlockQ4), bytes);
    case ShqDType::q8_0x16:
    case ShqDType::q4_0x16: {
      if (shape.size() != 2 && shape.size() != 4) return false;
      const uint64_t tile_rows = shape.size() == 2
                                     ? static_cast<uint64_t>(shape[0])
                                     : static_cast<uint64_t>(shape[0]) * static_cast<uint64_t>(shape[1]);
      const uint64_t tiles = (tile_rows + kTileRows - 1) / kTileRows;
      const uint64_t row_blocks = rows / tile_rows * blocks;
      return mul_ok(tiles, row_blocks, bytes) &&
             mul_ok(*bytes, dtype == ShqDType::q8_0x16 ? sizeof(TileQ8) : sizeof(TileQ4), bytes);
    }
  }
  return false;
}

ShqFile ShqFile::open(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO (or a device) that no one writes would wait for
  // ever before the regular-file check below could refuse it (a server's load
  // request names any path). It changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SHAMN_INPUT_CHECK(fd >= 0, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    SHAMN_INPUT_CHECK(false, what, " '", path, "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(ShqHeader)) {
    ::close(fd);
    SHAMN_INPUT_CHECK(false, what, " '", path, "' is ", size, " bytes: too short for the ", sizeof(ShqHeader),
                      "-byte header (truncated, or not a .shq file)");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  SHAMN_INPUT_CHECK(p != MAP_FAILED, "cannot map ", what, " '", path, "': ", std::strerror(errno));
  ShqFile f;
  f.path_ = path;
  f.what_ = what;
  f.size_ = size;
  f.base_ = std::shared_ptr<const uint8_t>(
      static_cast<const uint8_t*>(p), [size](const uint8_t* q) { ::munmap(const_cast<uint8_t*>(q), size); });
  f.parse();
  return f;
}

ShqFile ShqFile::from_bytes(const void* bytes, size_t size, const std::string& origin,
                            const std::string& what) {
  ShqFile f;
  f.path_ = origin;
  f.what_ = what;
  f.size_ = size;
  const size_t alloc = std::max<size_t>(size, 1);
  auto* copy = static_cast<uint8_t*>(aligned_alloc_bytes(alloc));
  if (size > 0) std::memcpy(copy, bytes, size);
  f.base_ = std::shared_ptr<const uint8_t>(
      copy, [alloc](const uint8_t* q) { aligned_free(const_cast<uint8_t*>(q), alloc); });
  f.parse();
  return f;
}

void ShqFile::parse() {
  const std::string& p = path_;
  const uint8_t* base = base_.get();
  SHAMN_INPUT_CHECK(size_ >= sizeof(ShqHeader), what_, " '", p, "' is ", size_, " bytes: too short for the ",
                    sizeof(ShqHeader), "-byte header (truncated, or not a .shq file)");
  std::memcpy(&header_, base, sizeof(ShqHeader));
  const ShqHeader& h = header_;
  SHAMN_INPUT_CHECK(std::memcmp(h.magic, kShqMagic, sizeof(kShqMagic)) == 0, "'", p,
                    "' is not a shamn .shq file (bad magic); make one with `shamn export`");
  // Version 2 differs only in what version 3 calls source_id (reserved zeros there).
  SHAMN_INPUT_CHECK(h.version == kShqVersion || h.version == 2, what_, " '", p, "' has format version ",
                    h.version, "; this shamn reads versions 2 and ", kShqVersion,
                    " (export the checkpoint again with this shamn)");
  SHAMN_INPUT_CHECK(crc32_bytes(base, offsetof(ShqHeader, header_crc)) == h.header_crc, what_, " '", p,
                    "': the header fails its checksum (corrupted)");
  SHAMN_INPUT_CHECK(h.header_bytes == sizeof(ShqHeader), what_, " '", p, "': header_bytes is ",
                    h.header_bytes, ", expected ", sizeof(ShqHeader));
  SHAMN_INPUT_CHECK(h.file_bytes == size_, what_, " '", p, "' is ", size_, " bytes but its header says ",
                    h.file_bytes, size_ < h.file_bytes ? " (truncated)" : " (trailing bytes)");
  SHAMN_INPUT_CHECK(h.quant <= static_cast<uint32_t>(ShqQuant::int4), what_, " '", p, "': unknown quant ",
                    h.quant);
  for (uint8_t b : h.reserved)
    SHAMN_INPUT_CHECK(b == 0, what_, " '", p, "': reserved header bytes are not zero");
  SHAMN_INPUT_CHECK(h.version > 2 || h.source_id() == 0, what_, " '", p,
                    "': reserved header bytes are not zero (version 2 has no source_id)");

  SHAMN_INPUT_CHECK(h.tensor_count >= 1 && h.tensor_count <= kMaxTensors, what_, " '", p, "': tensor_count ",
                    h.tensor_count, " is out of range");
  const uint64_t dir_bytes = uint64_t{h.tensor_count} * sizeof(ShqTensorEntry);
  SHAMN_INPUT_CHECK(h.directory_offset >= sizeof(ShqHeader) && in_file(h.directory_offset, dir_bytes, size_),
                    what_, " '", p, "': the tensor directory (offset ", h.directory_offset, ", ", dir_bytes,
                    " bytes) lies outside the ", size_, "-byte file");
  SHAMN_INPUT_CHECK(crc32_bytes(base + h.directory_offset, dir_bytes) == h.directory_crc, what_, " '", p,
                    "': the tensor directory fails its checksum (corrupted)");
  SHAMN_INPUT_CHECK(h.config_bytes > 0 && in_file(h.config_offset, h.config_bytes, size_), what_, " '", p,
                    "': the config (offset ", h.config_offset, ", ", h.config_bytes,
                    " bytes) lies outside the file");
  SHAMN_INPUT_CHECK(crc32_bytes(base + h.config_offset, h.config_bytes) == h.config_crc, what_, " '", p,
                    "': the config fails its checksum (corrupted)");
  SHAMN_INPUT_CHECK(in_file(h.tokenizer_offset, h.tokenizer_bytes, size_), what_, " '", p,
                    "': the tokenizer (offset ", h.tokenizer_offset, ", ", h.tokenizer_bytes,
                    " bytes) lies outside the file");
  SHAMN_INPUT_CHECK(crc32_bytes(base + h.tokenizer_offset, h.tokenizer_bytes) == h.tokenizer_crc, what_, " '",
                    p, "': the tokenizer fails its checksum (corrupted)");

  // Regions that may not overlap: [begin, end, what].
  struct Region {
    uint64_t begin, end;
    std::string what;
  };
  std::vector<Region> regions = {{0, sizeof(ShqHeader), "the header"},
                                 {h.directory_offset, h.directory_offset + dir_bytes, "the tensor directory"},
                                 {h.config_offset, h.config_offset + h.config_bytes, "the config"}};
  if (h.tokenizer_bytes > 0)
    regions.push_back({h.tokenizer_offset, h.tokenizer_offset + h.tokenizer_bytes, "the tokenizer"});

  std::map<std::string, size_t> seen;
  tensors_.reserve(h.tensor_count);
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    ShqTensorEntry e;
    std::memcpy(&e, base + h.directory_offset + uint64_t{i} * sizeof(ShqTensorEntry), sizeof(e));
    const size_t len = strnlen(e.name, kShqNameBytes);
    SHAMN_INPUT_CHECK(len > 0 && len < static_cast<size_t>(kShqNameBytes), what_, " '", p, "': tensor entry ",
                      i, " has an empty or unterminated name");
    std::string name(e.name, len);
    for (char c : name)
      SHAMN_INPUT_CHECK(c > ' ' && c < 127, what_, " '", p, "': tensor entry ", i,
                        " has a non-printable name");
    const std::string where = what_ + " '" + p + "': tensor '" + name + "'";
    SHAMN_INPUT_CHECK(seen.emplace(name, i).second, where, " appears twice in the directory");
    SHAMN_INPUT_CHECK(e.dtype <= static_cast<uint32_t>(ShqDType::q4_0x16), where, ": unknown dtype ",
                      e.dtype);
    const auto dtype = static_cast<ShqDType>(e.dtype);
    SHAMN_INPUT_CHECK(e.ndim >= 1 && e.ndim <= static_cast<uint32_t>(kShqMaxDims), where, ": ndim ", e.ndim,
                      " is out of range 1..", kShqMaxDims);
    Shape shape(e.shape, e.shape + e.ndim);
    for (uint32_t d = e.ndim; d < static_cast<uint32_t>(kShqMaxDims); ++d)
      SHAMN_INPUT_CHECK(e.shape[d] == 0, where, ": unused shape entries must be 0");
    uint64_t expected = 0;
    SHAMN_INPUT_CHECK(shq_tensor_bytes(dtype, shape, &expected), where, ": shape ", shape_str(shape),
                      " is invalid (a dim <= 0, too many elements, or a tiled dtype that is not 2-D or 4-D)");
    SHAMN_INPUT_CHECK(e.bytes == expected, where, ": ", e.bytes, " bytes of data, but ",
                      shq_dtype_name(dtype), shape_str(shape), " takes ", expected);
    const bool quantized = shq_dtype_quantized(dtype);
    SHAMN_INPUT_CHECK(e.block == (quantized ? kQuantBlock : 0), where, ": quantisation block ", e.block,
                      ", expected ", quantized ? kQuantBlock : 0);
    SHAMN_INPUT_CHECK(e.offset % kShqAlignment == 0, where, ": data offset ", e.offset, " is not ",
                      kShqAlignment, "-byte aligned");
    SHAMN_INPUT_CHECK(in_file(e.offset, e.bytes, size_), where, ": data (offset ", e.offset, ", ", e.bytes,
                      " bytes) runs past the end of the ", size_, "-byte file (truncated?)");
    SHAMN_INPUT_CHECK(crc32_bytes(base + e.offset, e.bytes) == e.crc, where,
                      " fails its checksum (the file is corrupted)");
    const int64_t bad = first_non_finite(dtype, base + e.offset, e.bytes);
    SHAMN_INPUT_CHECK(bad < 0, where, ": a non-finite ", shq_dtype_quantized(dtype) ? "block scale" : "value",
                      " at byte ", e.offset + static_cast<uint64_t>(bad), " of the file");
    regions.push_back({e.offset, e.offset + e.bytes, "tensor '" + name + "'"});
    tensors_.push_back({std::move(name), dtype, std::move(shape), base + e.offset, e.bytes});
  }
  std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < regions.size(); ++i)
    SHAMN_INPUT_CHECK(regions[i].begin >= regions[i - 1].end || regions[i].begin == regions[i].end, what_,
                      " '", p, "': ", regions[i].what, " overlaps ", regions[i - 1].what);
}

std::string ShqFile::config_toml() const {
  return std::string(reinterpret_cast<const char*>(base_.get() + header_.config_offset),
                     header_.config_bytes);
}

std::string ShqFile::tokenizer_text() const {
  return std::string(reinterpret_cast<const char*>(base_.get() + header_.tokenizer_offset),
                     header_.tokenizer_bytes);
}

bool ShqFile::has_tensor(const std::string& name) const {
  for (const ShqTensor& t : tensors_)
    if (t.name == name) return true;
  return false;
}

const ShqTensor& ShqFile::tensor(const std::string& name) const {
  for (const ShqTensor& t : tensors_)
    if (t.name == name) return t;
  SHAMN_INPUT_CHECK(false, what_, " '", path_, "' has no tensor '", name, "'");
  return tensors_.front();
}

}  // namespace shamn
