#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/checksum.h"
#include "core/temp_file_cleanup.h"

namespace shamn {
namespace {

template <class U>
U load(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
}

// One pass that copies and flags (vectorisable); the slow search for the first bad
// token runs only when there is one.
template <class U>
int64_t copy_range(const uint8_t* src, int64_t n, uint64_t vocab, int32_t* out) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    const U v = load<U>(src + i * static_cast<int64_t>(sizeof(U)));
    bad |= v >= vocab;
    out[i] = static_cast<int32_t>(v);
  }
  if (!bad) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (load<U>(src + i * static_cast<int64_t>(sizeof(U))) >= vocab) return i;
  return -1;
}

}  // namespace

TokenFormat token_format_from_string(const std::string& name) {
  if (name == "llmc") return TokenFormat::llmc;
  if (name == "u16") return TokenFormat::u16;
  SHAMN_INPUT_CHECK(false, "unknown token file format '", name,
                    "' (valid: llmc = llm.c's header + uint16/uint32 tokens, "
                    "u16 = headerless uint16 tokens)");
  return TokenFormat::llmc;
}

TokenFile::Mapping::~Mapping() {
  if (data) ::munmap(const_cast<uint8_t*>(data), bytes);
  if (fd >= 0) ::close(fd);
}

TokenFile::TokenFile(const std::string& path, TokenFormat format) : path_(path) {
  // O_NONBLOCK: opening a FIFO nobody writes to would otherwise wait forever,
  // before the regular-file check below could refuse it.
  map_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SHAMN_INPUT_CHECK(map_.fd >= 0, "cannot open token file '", path, "': ", std::strerror(errno));
  struct stat st {};
  const bool regular = ::fstat(map_.fd, &st) == 0 && S_ISREG(st.st_mode);
  file_bytes_ = regular ? static_cast<int64_t>(st.st_size) : 0;
  if (file_bytes_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(file_bytes_), PROT_READ, MAP_SHARED, map_.fd, 0);
    if (p != MAP_FAILED) {
      map_.data = static_cast<const uint8_t*>(p);
      map_.bytes = static_cast<size_t>(file_bytes_);
      // Windows are drawn at random: read-ahead would only pull in pages no batch uses.
      ::madvise(p, map_.bytes, MADV_RANDOM);
    }
  }
  SHAMN_INPUT_CHECK(regular, "token file '", path, "' is not a regular file");
  SHAMN_INPUT_CHECK(file_bytes_ > 0, "token file '", path, "' is empty (0 bytes)");
  SHAMN_INPUT_CHECK(map_.data != nullptr, "cannot mmap token file '", path, "'");
  if (format == TokenFormat::llmc)
    read_llmc_header();
  else
    read_u16_size();
  SHAMN_INPUT_CHECK(count_ > 0, "token file '", path, "' holds no tokens (header offset 8)");
}

void TokenFile::read_llmc_header() {
  SHAMN_INPUT_CHECK(file_bytes_ >= kTokenHeaderBytes, "token file '", path_, "' is ", file_bytes_,
                    " bytes, shorter than llm.c's 1024-byte header (truncated? "
                    "a headerless uint16 file needs format u16)");
  const int32_t magic = load<int32_t>(map_.data);
  const int32_t version = load<int32_t>(map_.data + 4);
  const int32_t count = load<int32_t>(map_.data + 8);
  if (magic == kTokenMagicU16) {
    SHAMN_INPUT_CHECK(version == 1, "token file '", path_, "': version ", version,
                      " at offset 4, expected 1 for uint16 tokens");
    token_bytes_ = 2;
  } else if (magic == kTokenMagicU32) {
    SHAMN_INPUT_CHECK(version == 7, "token file '", path_, "': version ", version,
                      " at offset 4, expected 7 for uint32 tokens");
    token_bytes_ = 4;
  } else {
    SHAMN_INPUT_CHECK(false, "token file '", path_, "': bad magic ", magic, " at offset 0 (expected ",
                      kTokenMagicU16, " or ", kTokenMagicU32,
                      "; not an llm.c token file? a headerless uint16 file needs format u16)");
  }
  SHAMN_INPUT_CHECK(count >= 0, "token file '", path_, "': negative token count ", count, " at offset 8");
  header_bytes_ = kTokenHeaderBytes;
  count_ = count;
  const int64_t expected = byte_offset(count_);
  SHAMN_INPUT_CHECK(file_bytes_ >= expected, "token file '", path_,
                    "' is truncated: the header "
                    "(offset 8) says ",
                    count_, " tokens of ", token_bytes_, " bytes, ending at byte ", expected,
                    ", but the file ends at byte ", file_bytes_);
  SHAMN_INPUT_CHECK(file_bytes_ == expected, "token file '", path_,
                    "': size mismatch: the "
                    "header (offset 8) says ",
                    count_, " tokens of ", token_bytes_, " bytes, ending at byte ", expected,
                    ", but the file is ", file_bytes_, " bytes (", file_bytes_ - expected,
                    " unexpected bytes from offset ", expected, ")");
}

void TokenFile::read_u16_size() {
  SHAMN_INPUT_CHECK(file_bytes_ % 2 == 0, "token file '", path_,
                    "' (format u16, headerless "
                    "uint16 tokens) is ",
                    file_bytes_, " bytes, an odd size: the byte at offset ", file_bytes_ - 1,
                    " is half a token (truncated?)");
  // A file that starts with llm.c's header would otherwise read as 512 junk tokens.
  const int32_t magic = file_bytes_ >= 4 ? load<int32_t>(map_.data) : 0;
  SHAMN_INPUT_CHECK(magic != kTokenMagicU16 && magic != kTokenMagicU32, "token file '", path_,
                    "' starts with llm.c's magic ", magic,
                    " at offset 0: read it with format "
                    "llmc, not u16");
  header_bytes_ = 0;
  token_bytes_ = 2;
  count_ = file_bytes_ / 2;
}

uint32_t TokenFile::checksum() const { return crc32_bytes(map_.data, map_.bytes); }

uint32_t TokenFile::token(int64_t i) const {
  const uint8_t* p = map_.data + byte_offset(i);
  return token_bytes_ == 2 ? load<uint16_t>(p) : load<uint32_t>(p);
}

void TokenFile::check_unchanged() const {
  struct stat st {};
  SHAMN_INPUT_CHECK(::fstat(map_.fd, &st) == 0, "cannot stat token file '", path_,
                    "': ", std::strerror(errno));
  SHAMN_INPUT_CHECK(static_cast<int64_t>(st.st_size) >= file_bytes_, "token file '", path_,
                    "' was cut short while in use: it was ", file_bytes_, " bytes and is now ", st.st_size,
                    " (rewritten in place? write a new file and rename it over the old one, "
                    "as shamn prepare does, or stop the run first)");
}

void TokenFile::check_range(int64_t begin, int64_t n) const {
  SHAMN_INPUT_CHECK(begin >= 0 && n >= 0 && begin + n <= count_, "token file '", path_, "' has ", count_,
                    " tokens (", file_bytes_, " bytes); cannot read tokens [", begin, ", ", begin + n,
                    "), bytes [", byte_offset(begin), ", ", byte_offset(begin + n),
                    "): a window larger than the file?");
}

int64_t TokenFile::copy_checked(int64_t begin, int64_t n, int64_t vocab, int32_t* out) const {
  SHAMN_CHECK(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max() + int64_t{1}, "vocab_size ", vocab,
              " does not fit int32 token ids");
  const uint8_t* src = map_.data + byte_offset(begin);
  const auto limit = static_cast<uint64_t>(vocab);
  const int64_t bad =
      token_bytes_ == 2 ? copy_range<uint16_t>(src, n, limit, out) : copy_range<uint32_t>(src, n, limit, out);
  return bad < 0 ? -1 : begin + bad;
}

void TokenFile::throw_bad_token(int64_t index, int64_t vocab) const {
  throw InputError(detail::concat("token file '", path_, "': token ", token(index), " at index ", index,
                                  " (byte offset ", byte_offset(index), ") is >= vocab_size ", vocab,
                                  " (tokenized with a different vocabulary?)"));
}

Tensor TokenFile::window(int64_t begin, int64_t n, int64_t vocab) const {
  check_range(begin, n);
  check_unchanged();
  Tensor out = Tensor::empty({n}, DType::i32);
  const int64_t bad = copy_checked(begin, n, vocab, out.data<int32_t>());
  if (bad >= 0) throw_bad_token(bad, vocab);
  return out;
}

void TokenFile::check_vocab(int64_t vocab) const {
  check_unchanged();
  if (token_bytes_ == 2 && vocab > 0xFFFF) return;  // every uint16 fits
  constexpr int64_t kChunk = int64_t{1} << 16;
  std::vector<int32_t> scratch(static_cast<size_t>(std::min(kChunk, std::max<int64_t>(count_, 1))));
  for (int64_t begin = 0; begin < count_; begin += kChunk) {
    const int64_t bad = copy_checked(begin, std::min(kChunk, count_ - begin), vocab, scratch.data());
    if (bad >= 0) throw_bad_token(bad, vocab);
  }
}

TokenFileWriter::TokenFileWriter(const std::string& path, const std::vector<uint32_t>& tokens)
    : file_(path, "tokens") {
  SHAMN_INPUT_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                    "cannot write '", path, "': ", tokens.size(),
                    " tokens do not fit llm.c's int32 token count");
  const bool wide = std::any_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t > 0xFFFF; });
  int32_t header[256] = {};
  header[0] = wide ? kTokenMagicU32 : kTokenMagicU16;
  header[1] = wide ? 7 : 1;
  header[2] = static_cast<int32_t>(tokens.size());
  file_.write(header, sizeof(header));
  if (wide) {
    file_.write(tokens.data(), tokens.size() * sizeof(uint32_t));
  } else {
    std::vector<uint16_t> chunk;
    constexpr size_t kChunk = size_t{1} << 16;
    for (size_t i = 0; i < tokens.size(); i += kChunk) {
      const size_t n = std::min(kChunk, tokens.size() - i);
      chunk.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                   tokens.begin() + static_cast<std::ptrdiff_t>(i + n));
      file_.write(chunk.data(), n * sizeof(uint16_t));
    }
  }
}

void TokenFileWriter::commit() { file_.commit(); }

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens) {
  TokenFileWriter(path, tokens).commit();
}

void write_train_val_files(const std::string& dir, const std::vector<uint32_t>& train,
                           const std::vector<uint32_t>& val) {
  const std::filesystem::path root(dir);
  const std::string val_path = (root / "val.bin").string();
  TokenFileWriter train_file((root / "train.bin").string(), train);
  TokenFileWriter val_file(val_path, val);
  // Both whole on disk before either replaces anything (a full disk, fsync's or
  // close's late errors among them, fails here with the old pair intact). An old
  // val.bin goes first: should a rename fail between the two, what is left is a
  // missing val.bin, never a new train.bin beside a val.bin of another tokenizer.
  train_file.sync();
  val_file.sync();
  // A Ctrl-C (or SIGTERM, a hangup) from here to the last rename would leave the
  // pair broken, as a crash there does: those signals wait until both are in place,
  // whichever thread the kernel gives them to.
  const StopSignalsDeferred deferred;
  std::error_code ec;
  if (std::filesystem::is_regular_file(val_path, ec)) std::filesystem::remove(val_path, ec);
  train_file.commit();
  val_file.commit();
}

}  // namespace shamn
