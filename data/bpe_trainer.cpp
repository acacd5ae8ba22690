#include "data/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>

#include "core/check.h"
#include "core/parallel.h"
#include "data/pretokenize.h"

namespace shamn {

namespace {

constexpr size_t kCountBlockBytes = size_t{1} << 20;

using PairKey = uint64_t;  // left << 32 | right: ordering keys orders pairs (left, right)

PairKey pair_key(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

struct Word {
  std::vector<uint32_t> symbols;
  int64_t count = 0;
};

struct HeapEntry {
  int64_t count;
  PairKey pair;
};

// The top is the largest count, then the smallest pair.
struct HeapOrder {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.count != b.count ? a.count < b.count : a.pair > b.pair;
  }
};

class BpeState {
 public:
  explicit BpeState(const std::vector<std::pair<std::string_view, int64_t>>& chunks) {
    words_.reserve(chunks.size());
    for (const auto& [bytes, count] : chunks) {
      Word w;
      w.count = count;
      for (char c : bytes) w.symbols.push_back(static_cast<unsigned char>(c));
      words_.push_back(std::move(w));
    }
    for (uint32_t wi = 0; wi < words_.size(); ++wi) {
      const Word& w = words_[wi];
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i)
        add_pair(pair_key(w.symbols[i], w.symbols[i + 1]), w.count, wi);
    }
    for (const auto& [pair, count] : pair_counts_) heap_.push({count, pair});
  }

  // Pops the best pair (count > 0); false when no pair is left.
  bool best_pair(PairKey& pair) {
    while (!heap_.empty()) {
      const HeapEntry top = heap_.top();
      heap_.pop();
      const auto it = pair_counts_.find(top.pair);
      const int64_t now = it == pair_counts_.end() ? 0 : it->second;
      // Counts of existing pairs only fall, so a stale entry overstates its
      // pair: re-queue it at its true count and look again.
      if (now == top.count) {
        pair = top.pair;
        return true;
      }
      if (now > 0) heap_.push({now, top.pair});
    }
    return false;
  }

  // Replaces every (left, right) by `merged` in the chunks that hold it.
  void apply_merge(PairKey pair, uint32_t merged) {
    const uint32_t a = static_cast<uint32_t>(pair >> 32);
    const uint32_t b = static_cast<uint32_t>(pair);
    std::vector<uint32_t> holders = std::move(where_[pair]);
    where_.erase(pair);
    new_pairs_.clear();
    for (uint32_t wi : holders) merge_in_word(wi, a, b, merged);
    pair_counts_.erase(pair);
    // A new pair can fall back to 0 within this merge (a b a b: (M, a) comes
    // and goes); it may also be listed twice. Stale duplicates are harmless.
    for (PairKey p : new_pairs_) {
      const int64_t count = pair_counts_[p];
      if (count > 0) heap_.push({count, p});
    }
  }

 private:
  void add_pair(PairKey p, int64_t delta, uint32_t word) {
    pair_counts_[p] += delta;
    std::vector<uint32_t>& list = where_[p];
    if (list.empty() || list.back() != word) list.push_back(word);
  }

  void add_new_pair(PairKey p, int64_t delta, uint32_t word) {
    int64_t& count = pair_counts_[p];
    if (count == 0) new_pairs_.push_back(p);
    count += delta;
    std::vector<uint32_t>& list = where_[p];
    if (list.empty() || list.back() != word) list.push_back(word);
  }

  // Merges occurrences left to right in place. Each one moves the counts of
  // its neighbour pairs: (prev, a) -> (prev, merged), (b, next) -> (merged, next).
  // `prev` is read from the merged output, so back-to-back occurrences
  // (a b a b -> M M) chain correctly.
  void merge_in_word(uint32_t wi, uint32_t a, uint32_t b, uint32_t merged) {
    Word& w = words_[wi];
    std::vector<uint32_t>& s = w.symbols;
    const int64_t f = w.count;
    size_t out = 0;
    for (size_t i = 0; i < s.size();) {
      if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
        if (out > 0) {
          pair_counts_[pair_key(s[out - 1], a)] -= f;
          add_new_pair(pair_key(s[out - 1], merged), f, wi);
        }
        if (i + 2 < s.size()) {
          pair_counts_[pair_key(b, s[i + 2])] -= f;
          add_new_pair(pair_key(merged, s[i + 2]), f, wi);
        }
        s[out++] = merged;
        i += 2;
      } else {
        s[out++] = s[i++];
      }
    }
    s.resize(out);
  }

  std::vector<Word> words_;
  std::unordered_map<PairKey, int64_t> pair_counts_;
  std::unordered_map<PairKey, std::vector<uint32_t>> where_;  // pair -> words (may be stale)
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapOrder> heap_;
  std::vector<PairKey> new_pairs_;
};

}  // namespace

std::vector<std::pair<std::string_view, int64_t>> count_chunks(std::string_view text) {
  const std::vector<size_t> cuts = split_into_blocks(text, kCountBlockBytes);
  const int64_t blocks = static_cast<int64_t>(cuts.size()) - 1;
  std::vector<std::unordered_map<std::string_view, int64_t>> local(static_cast<size_t>(blocks));
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const std::string_view block = text.substr(cuts[k], cuts[k + 1] - cuts[k]);
      auto& counts = local[static_cast<size_t>(k)];
      for (size_t b = 0; b < block.size();) {
        const size_t e = chunk_end(block, b);
        ++counts[block.substr(b, e - b)];
        b = e;
      }
    }
  });
  // Integer sums: the totals do not depend on which block counted what.
  std::unordered_map<std::string_view, int64_t> total;
  for (const auto& counts : local)
    for (const auto& [chunk, count] : counts) total[chunk] += count;
  std::vector<std::pair<std::string_view, int64_t>> out(total.begin(), total.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Merge> train_bpe(std::string_view text, int64_t vocab_size) {
  SHAMN_INPUT_CHECK(vocab_size >= 256, "a byte-level BPE vocabulary needs vocab_size >= 256, got ",
                    vocab_size);
  BpeState state(count_chunks(text));
  std::vector<Merge> merges;
  PairKey pair = 0;
  while (static_cast<int64_t>(merges.size()) + 256 < vocab_size && state.best_pair(pair)) {
    const uint32_t merged = static_cast<uint32_t>(256 + merges.size());
    merges.push_back({static_cast<uint32_t>(pair >> 32), static_cast<uint32_t>(pair)});
    state.apply_merge(pair, merged);
  }
  return merges;
}

}  // namespace shamn
