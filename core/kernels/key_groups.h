#pragma once
// Entries grouped by a key (the destination row of a scatter-add, the bucket of a
// hash): a stable counting sort. Group g's entries are order[start[g], start[g+1]),
// in increasing entry number, so a scatter that adds each group's entries in that
// order gives the same sums at any thread count.
//
// Fixed blocks of entries are counted and placed in parallel; within every group a
// block's entries come after the earlier blocks', which is the serial sort's order.
// (Serial, these sorts were tens of milliseconds a step at 16 threads: the memory's
// value gradient sorts 1.6M entries into 65,536 rows at batch 96 x 512.)
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/parallel.h"

namespace shamn {

struct KeyGroups {
  std::vector<int64_t> start;  // [groups + 1]
  Buffer<int64_t> order;       // [entries kept], grouped
};

// Entries per counting block, at least: independent of the thread count. A block
// also has at least 4 entries per group, so that its counts (one per group) cost
// less than its entries (the memory's values have 65,536 groups).
inline constexpr int64_t kKeyGroupBlock = int64_t{1} << 16;

// key(e) is entry e's group in [0, groups), or negative to leave e out.
template <class Key>
KeyGroups group_by_key(int64_t entries, int64_t groups, Key key) {
  KeyGroups out;
  out.start.assign(static_cast<size_t>(groups) + 1, 0);
  const int64_t block = std::max(kKeyGroupBlock, 4 * groups);
  const int64_t blocks = std::max<int64_t>(1, (entries + block - 1) / block);
  // slot[blk * groups + g]: block blk's entries in g, then where they start within g.
  Buffer<int64_t> slot(blocks * groups);
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      int64_t* count = slot.data() + blk * groups;
      std::fill(count, count + groups, int64_t{0});
      const int64_t end = std::min(entries, (blk + 1) * block);
      for (int64_t e = blk * block; e < end; ++e) {
        const int64_t g = key(e);
        if (g >= 0) ++count[g];
      }
    }
  });
  parallel_for(0, groups, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t g = lo; g < hi; ++g) {
      int64_t before = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t n = slot[blk * groups + g];
        slot[blk * groups + g] = before;
        before += n;
      }
      out.start[static_cast<size_t>(g) + 1] = before;
    }
  });
  for (int64_t g = 0; g < groups; ++g) out.start[g + 1] += out.start[g];
  out.order.resize(out.start[groups]);
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      int64_t* next = slot.data() + blk * groups;
      const int64_t end = std::min(entries, (blk + 1) * block);
      for (int64_t e = blk * block; e < end; ++e) {
        const int64_t g = key(e);
        if (g >= 0) out.order[out.start[g] + next[g]++] = e;
      }
    }
  });
  return out;
}

}  // namespace shamn
