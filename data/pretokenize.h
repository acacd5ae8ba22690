#pragma once
// Pre-tokenization: cuts text into chunks that BPE merges never cross, in the
// spirit of GPT-2's split, written by hand over bytes (no regex, no Unicode
// tables). Every byte is in one class:
//   letter      A-Z, a-z and every byte >= 0x80 (so UTF-8 words stay whole)
//   digit       0-9
//   whitespace  space, \t, \n, \v, \f, \r
//   other       everything else (punctuation, NUL and other control bytes)
// A chunk is one of:
//   - an optional leading space + a run of letters            " hello", "world"
//   - an optional leading space + 1 to 3 digits               " 123", "45"
//     (digit runs are cut into groups of 3 from the left, "12345" -> "123" "45",
//     so numbers share a small set of tokens instead of one token per number)
//   - an optional leading space + a run of other bytes        " (", "...", "\"."
//   - a run of whitespace, except that a final space followed by a
//     non-whitespace byte is left to start the next chunk: "a  b" -> "a" " " " b",
//     "x\n\ny" -> "x" "\n\n" "y"
// No chunk is longer than kMaxChunkBytes: a longer run (a long unspaced UTF-8
// sentence, a line of dashes) is cut every kMaxChunkBytes bytes counted from
// its start. This bounds the work per chunk in training and encoding.
// The chunks tile the text exactly: concatenated they give it back.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace shamn {

inline constexpr size_t kMaxChunkBytes = 64;
inline constexpr size_t kMaxDigitChunk = 3;

// End (exclusive) of the chunk starting at `begin` (< text.size()).
size_t chunk_end(std::string_view text, size_t begin);

// Every chunk of `text`, in order.
std::vector<std::string_view> pretokenize(std::string_view text);

// True when a chunk starts at `pos` (0 < pos < text.size()) whatever came
// before the byte pos - 1: the bytes at pos - 1 and pos are in different
// classes and the byte at pos - 1 is not a space (which could lead the next
// chunk). Lets blocks of text be pre-tokenized independently, in parallel.
bool is_sure_chunk_start(std::string_view text, size_t pos);

// Offsets 0 = b0 < b1 < ... < bk = text.size() cutting the text into blocks
// of about `target_bytes` (at least, unless at the end), each bi a sure chunk
// start, so pre-tokenizing the blocks one by one gives the same chunks as the
// whole text. The cuts depend only on the text and target_bytes.
std::vector<size_t> split_into_blocks(std::string_view text, size_t target_bytes);

}  // namespace shamn
