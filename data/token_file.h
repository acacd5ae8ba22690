#pragma once
// Token files, read through a read-only shared mmap: nothing is copied into RAM, and
// with MADV_RANDOM the kernel pages in only the windows that batches touch.
// - llmc: llm.c's format, a 1024-byte header of 256 int32 (magic 20240520 + version 1
//   for uint16 tokens, magic 20240801 + version 7 for uint32 tokens; header[2] = token
//   count), then the tokens;
// - u16: headerless raw uint16 tokens (nanoGPT's train.bin).
// Every error names the file and the byte offset at fault.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/tensor.h"

namespace shamn {

inline constexpr int32_t kTokenMagicU16 = 20240520;
inline constexpr int32_t kTokenMagicU32 = 20240801;
inline constexpr int64_t kTokenHeaderBytes = 1024;

enum class TokenFormat { llmc, u16 };

// "llmc" | "u16" (config values); throws InputError listing the valid names.
TokenFormat token_format_from_string(const std::string& name);

class TokenFile {
 public:
  // Checks the header (llmc) or the size (u16); throws InputError naming the file.
  explicit TokenFile(const std::string& path, TokenFormat format = TokenFormat::llmc);
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }
  int bytes_per_token() const { return token_bytes_; }
  int64_t byte_offset(int64_t i) const { return header_bytes_ + i * token_bytes_; }
  uint32_t token(int64_t i) const;
  // CRC-32 of the whole file, header included (data-parallel ranks compare it).
  uint32_t checksum() const;

  // Copies tokens [begin, begin + n) into out as int32 and returns the index of the
  // first token >= vocab, or -1. It does not throw so that parallel callers can report
  // the first bad token in a fixed order (throw_bad_token), whatever the thread count.
  int64_t copy_checked(int64_t begin, int64_t n, int64_t vocab, int32_t* out) const;
  [[noreturn]] void throw_bad_token(int64_t index, int64_t vocab) const;
  // Throws InputError if the file is now shorter than when it was mapped. Reading a
  // page past a file's new end is a SIGBUS, so readers call this before each batch:
  // a file truncated in place (cp over it, an editor's save) gets an error naming it
  // rather than a crash, unless it is cut in the moment between this check and the copy.
  void check_unchanged() const;
  // Throws InputError unless [begin, begin + n) lies inside the file.
  void check_range(int64_t begin, int64_t n) const;

  // Tokens [begin, begin + n) as an int32 tensor, each checked < vocab.
  Tensor window(int64_t begin, int64_t n, int64_t vocab) const;
  // Throws InputError naming the first token >= vocab, if any: one pass over the
  // file, so that a run fails before it starts rather than at the first bad batch.
  void check_vocab(int64_t vocab) const;

 private:
  // Unmaps and closes in its destructor, so a constructor that throws after open or
  // mmap leaks nothing. The descriptor stays open for check_unchanged's fstat.
  struct Mapping {
    const uint8_t* data = nullptr;
    size_t bytes = 0;
    int fd = -1;
    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping();
  };
  void read_llmc_header();
  void read_u16_size();

  std::string path_;
  Mapping map_;
  int64_t file_bytes_ = 0;
  int64_t header_bytes_ = 0;
  int64_t count_ = 0;
  int token_bytes_ = 2;
};

// A token file in llm.c's format (uint16 when every token fits, else uint32), written
// whole to a temporary name; commit() moves it into place (see core/atomic_file.h).
// Without commit(), nothing is left at `path` or beside it.
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, const std::vector<uint32_t>& tokens);
  void sync() { file_.sync(); }  // core/atomic_file.h
  void commit();

 private:
  AtomicFile file_;
};

// One token file, atomically.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens);

// DIR/train.bin and DIR/val.bin as a pair: both are written in full and fsynced
// before either replaces an old one, so a failed write leaves the old pair as it was.
void write_train_val_files(const std::string& dir, const std::vector<uint32_t>& train,
                           const std::vector<uint32_t>& val);

}  // namespace shamn
