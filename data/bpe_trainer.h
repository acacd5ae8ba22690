#pragma once
// Byte-level BPE training. Ids 0..255 are the bytes; merge i joins two earlier
// ids into id 256 + i. Training counts the text's distinct chunks
// (data/pretokenize.h) and then repeatedly merges the most frequent adjacent
// pair inside the chunks, weighted by chunk counts; ties go to the smallest
// (left, right) ids. Pair counts are updated incrementally (only the chunks
// holding the merged pair are touched) and the best pair comes from a max-heap
// whose stale entries are skipped when popped. The merges depend only on the
// text, never on the thread count.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace shamn {

struct Merge {
  uint32_t left = 0, right = 0;
  bool operator==(const Merge&) const = default;
};

// Distinct chunks of `text` with their counts, sorted by bytes. Counted in
// parallel over blocks of the text.
std::vector<std::pair<std::string_view, int64_t>> count_chunks(std::string_view text);

// Up to vocab_size - 256 merges (vocab_size >= 256); fewer when the chunks run
// out of pairs (every chunk is a single token).
std::vector<Merge> train_bpe(std::string_view text, int64_t vocab_size);

}  // namespace shamn
