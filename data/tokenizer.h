#pragma once
// The byte-level BPE tokenizer. Ids 0..255 are the bytes; id 256 + i is merge i,
// the concatenation of two earlier ids. Any byte string encodes (UTF-8 or not,
// NULs, \r, invalid sequences) and decode(encode(x)) == x.
//
// Encoding pre-tokenizes the text (data/pretokenize.h) and, inside each chunk,
// repeatedly merges the adjacent pair with the lowest merge rank (the leftmost
// such pair on a tie) until no pair of the chunk is a merge. Big texts are cut
// into blocks at sure chunk starts and encoded in parallel, so the ids do not
// depend on the thread count; each block keeps a cache of chunk -> ids.
//
// Tokenizer file (text, UTF-8 free: numbers only), one item per line, every
// line ending in '\n':
//   shamn-bpe 1            magic and format version
//   vocab_size N           256 <= N <= kMaxVocabSize
//   L R                    merge i (i = 0 .. N-257) on line 3 + i: ids L, R < 256 + i,
//   ...                    decimal, one space between; the merge makes id 256 + i
// Nothing may follow the N - 256 merge lines, and no pair may appear twice. No
// merge may make a token longer than kMaxChunkBytes (data/pretokenize.h): text
// is encoded in chunks no longer than that, so such a token could never apply.
// A malformed file is an InputError naming "FILE:LINE".
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/model_config.h"
#include "data/bpe_trainer.h"

namespace shamn {

class Tokenizer {
 public:
  Tokenizer() : Tokenizer(std::vector<Merge>{}) {}  // the 256 bytes only
  explicit Tokenizer(std::vector<Merge> merges);    // merge i may use ids < 256 + i

  // vocab_size >= 256; the result has fewer tokens when the text runs out of pairs.
  static Tokenizer train(std::string_view text, int64_t vocab_size);
  static Tokenizer load(const std::string& path);
  // The file format from memory (a tokenizer embedded in a model file); errors name `origin`.
  static Tokenizer parse(const std::string& text, const std::string& origin);
  void save(const std::string& path) const;  // temp file + rename: never half-written
  std::string to_text() const;               // exactly what save() writes

  int64_t vocab_size() const { return 256 + static_cast<int64_t>(merges_.size()); }
  const std::vector<Merge>& merges() const { return merges_; }

  std::vector<uint32_t> encode(std::string_view text) const;
  // An id >= vocab_size() is an InputError naming its index.
  std::string decode(const uint32_t* ids, int64_t n) const;
  std::string decode(const std::vector<uint32_t>& ids) const {
    return decode(ids.data(), static_cast<int64_t>(ids.size()));
  }
  const std::string& token_bytes(uint32_t id) const;
  // A model's token ids as text: a model may have more tokens than its
  // tokenizer (vocab_size is rounded up), and those stand for no bytes.
  const std::string& model_token_bytes(int32_t id) const;
  std::string model_text(const std::vector<int32_t>& ids) const;
  // The most bytes one token stands for: a text of B bytes encodes to at least
  // ceil(B / longest_token_bytes()) tokens, which bounds a count without encoding.
  int64_t longest_token_bytes() const { return longest_; }

 private:
  static constexpr uint32_t kNoMerge = UINT32_MAX;
  uint32_t rank_of(uint32_t left, uint32_t right) const;
  void encode_chunk(std::string_view chunk, std::vector<uint32_t>& out) const;
  void encode_block(std::string_view block, std::vector<uint32_t>& out) const;

  std::vector<Merge> merges_;
  std::vector<std::string> bytes_;                // id -> the bytes it stands for
  std::unordered_map<uint64_t, uint32_t> ranks_;  // left << 32 | right -> merge index
  int64_t longest_ = 1;
};

}  // namespace shamn
