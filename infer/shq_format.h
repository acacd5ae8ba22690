#pragma once
// The .shq model file: what `shamn export` writes and the runtime maps and
// reads in place. Little-endian, every struct below laid out exactly as
// written (static_asserts pin the sizes). The full description, with the
// rules the loader enforces, is in infer/README.md.
//
//   offset 0      ShqHeader (128 bytes)
//   ...           ShqTensorEntry[tensor_count] (128 bytes each) at directory_offset
//   ...           config TOML text, tokenizer text (shamn-bpe 1), unpadded
//   ...           tensor data, each tensor starting on a 64-byte boundary
#include <bit>
#include <cstdint>

namespace shamn {

static_assert(std::endian::native == std::endian::little, ".shq files are little-endian");

inline constexpr char kShqMagic[8] = {'S', 'H', 'A', 'M', 'N', 'Q', 'M', '\x1a'};
// 2: the row-interleaved q8_0x16 / q4_0x16; 3: source_id (LoRA adapters find their base).
inline constexpr uint32_t kShqVersion = 3;
inline constexpr uint64_t kShqAlignment = 64;
inline constexpr int kShqMaxDims = 4;
inline constexpr int kShqNameBytes = 64;  // NUL-padded, at least one NUL

enum class ShqDType : uint32_t {
  f32 = 0,
  i32 = 1,
  q8_0 = 2,  // rows of BlockQ8 (infer/quant_blocks.h) along the last dim
  q4_0 = 3,  // rows of BlockQ4 along the last dim
  // The same blocks in row-interleaved tiles of 16 rows (infer/quant_tiles.h).
  // 2-D [R, C]: R rows; 4-D block-sparse values [nob, b, a, b]: nob * b rows,
  // each a segments of b values. Rows are padded to a multiple of 16.
  q8_0x16 = 4,
  q4_0x16 = 5,
};

// The dtypes made of quantisation blocks, and the row-interleaved ones.
inline bool shq_dtype_quantized(ShqDType d) { return d != ShqDType::f32 && d != ShqDType::i32; }
inline bool shq_dtype_tiled(ShqDType d) { return d == ShqDType::q8_0x16 || d == ShqDType::q4_0x16; }

// What `shamn export --quant` asked for; each tensor's own dtype is in its entry.
enum class ShqQuant : uint32_t { f32 = 0, int8 = 1, int4 = 2 };

struct ShqHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(ShqHeader)
  uint64_t file_bytes;    // the whole file
  uint32_t quant;         // ShqQuant
  uint32_t tensor_count;
  uint64_t directory_offset;
  uint64_t config_offset, config_bytes;        // the resolved [model] tables as TOML
  uint64_t tokenizer_offset, tokenizer_bytes;  // 0 bytes: no tokenizer
  uint64_t step;                               // training step of the source checkpoint
  uint32_t config_crc, tokenizer_crc, directory_crc;
  // The identity of the checkpoint tensors this file was exported from (for a
  // LoRA adapter: of its base model), 0 = unknown (version 2 files). Two
  // 32-bit words, low first: a u64 here would not be 8-byte aligned.
  uint32_t source_id_words[2];
  uint8_t reserved[24];  // zero
  uint64_t source_id() const { return uint64_t{source_id_words[1]} << 32 | source_id_words[0]; }
  void set_source_id(uint64_t id) {
    source_id_words[0] = static_cast<uint32_t>(id);
    source_id_words[1] = static_cast<uint32_t>(id >> 32);
  }
  uint32_t header_crc;  // CRC-32 of the 124 bytes before it
};
static_assert(sizeof(ShqHeader) == 128);

struct ShqTensorEntry {
  char name[kShqNameBytes];    // SPEC name, e.g. "layers.0.mixer.out.values"
  uint32_t dtype;              // ShqDType
  uint32_t ndim;               // 1..4
  int64_t shape[kShqMaxDims];  // unused dims are 0
  uint64_t offset;             // from the start of the file, a multiple of 64
  uint64_t bytes;              // exactly what dtype and shape imply
  uint32_t block;              // values per quantisation block: 32 for the q* dtypes, 0 otherwise
  uint32_t crc;                // CRC-32 of the data bytes
};
static_assert(sizeof(ShqTensorEntry) == 128);

const char* shq_dtype_name(ShqDType dtype);
const char* shq_quant_name(ShqQuant quant);

}  // namespace shamn
