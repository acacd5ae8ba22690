#include "data/pretokenize.h"

#include <algorithm>
#include <array>

namespace shamn {

namespace {

enum class ByteClass : uint8_t { letter, digit, whitespace, other };

constexpr std::array<ByteClass, 256> make_class_table() {
  std::array<ByteClass, 256> t{};
  for (int c = 0; c < 256; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80)
      t[c] = ByteClass::letter;
    else if (c >= '0' && c <= '9')
      t[c] = ByteClass::digit;
    else if (c == ' ' || (c >= '\t' && c <= '\r'))  // \t \n \v \f \r
      t[c] = ByteClass::whitespace;
    else
      t[c] = ByteClass::other;
  }
  return t;
}

constexpr std::array<ByteClass, 256> kClass = make_class_table();

ByteClass byte_class(char c) { return kClass[static_cast<unsigned char>(c)]; }

}  // namespace

size_t chunk_end(std::string_view text, size_t begin) {
  const size_t n = text.size();
  size_t i = begin;
  if (text[i] == ' ' && i + 1 < n && byte_class(text[i + 1]) != ByteClass::whitespace) ++i;
  const ByteClass c = byte_class(text[i]);
  size_t limit = std::min(n, begin + kMaxChunkBytes);
  if (c == ByteClass::digit) limit = std::min(limit, i + kMaxDigitChunk);
  size_t end = i + 1;
  while (end < limit && byte_class(text[end]) == c) ++end;
  // The run's last space goes with the word after it. A run that is a single
  // space never gets here: the leading-space case above took it.
  if (c == ByteClass::whitespace && end < n && text[end - 1] == ' ' &&
      byte_class(text[end]) != ByteClass::whitespace)
    --end;
  return end;
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> chunks;
  for (size_t b = 0; b < text.size();) {
    const size_t e = chunk_end(text, b);
    chunks.push_back(text.substr(b, e - b));
    b = e;
  }
  return chunks;
}

bool is_sure_chunk_start(std::string_view text, size_t pos) {
  return text[pos - 1] != ' ' && byte_class(text[pos - 1]) != byte_class(text[pos]);
}

std::vector<size_t> split_into_blocks(std::string_view text, size_t target_bytes) {
  std::vector<size_t> cuts{0};
  size_t pos = std::max<size_t>(target_bytes, 1);
  while (pos < text.size()) {
    while (pos < text.size() && !is_sure_chunk_start(text, pos)) ++pos;
    if (pos == text.size()) break;
    cuts.push_back(pos);
    pos += std::max<size_t>(target_bytes, 1);
  }
  cuts.push_back(text.size());
  return cuts;
}

}  // namespace shamn
