#include "core/aligned.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

#include <sys/mman.h>

#include <tbb/task_arena.h>

#include "core/ceil_div.h"
#include "core/check.h"
#include "core/parallel.h"

// Under AddressSanitizer a cached block is poisoned while it waits in the cache:
// it is still allocated as far as the C library knows, so without this a tensor
// read after its storage was freed would go unnoticed (the sanitizer build,
// cmake/sanitize.cmake).
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SHAMN_POISON(ptr, n) ASAN_POISON_MEMORY_REGION(ptr, n)
#define SHAMN_UNPOISON(ptr, n) ASAN_UNPOISON_MEMORY_REGION(ptr, n)
#else
#define SHAMN_POISON(ptr, n) ((void)(ptr), (void)(n))
#define SHAMN_UNPOISON(ptr, n) ((void)(ptr), (void)(n))
#endif

namespace shamn {
namespace {

// Populates [p, p + bytes) in slices of kPopulateSliceBytes, one task each. A
// slice the kernel cannot populate (before Linux 5.14, or short of memory) is left
// to fault in at its first writes, as the C library's blocks do. Isolated: while
// this thread waits for the slices it takes no unrelated task, which could find
// the thread-local state of the task that is allocating in mid-update.
void populate_pages(char* p, size_t bytes) {
  constexpr int64_t kPopulateSliceBytes = int64_t{4} << 20;
  const int64_t slices = ceil_div(static_cast<int64_t>(bytes), kPopulateSliceBytes);
  tbb::this_task_arena::isolate([&] {
    parallel_for(0, slices, 1, [&](int64_t lo, int64_t hi) {
      const auto begin = static_cast<size_t>(lo * kPopulateSliceBytes);
      const size_t end = std::min(bytes, static_cast<size_t>(hi * kPopulateSliceBytes));
      madvise(p + begin, end - begin, MADV_POPULATE_WRITE);
    });
  });
}

// A block of kPopulatedBlockBytes or more is mapped and its pages populated at
// once: left to the C library it was faulted in page by page at its first
// writes, and on default at batch 96 (9 GB of fresh tensors) the first step took
// 25-32 s that way and 18-23 s populated, on a VM whose page faults are slow
// (experiments/roofline.md, "Stop 62"). The pool's threads populate it slice by
// slice: one MAP_POPULATE call ran on the allocating thread alone and made that
// first step 2.2x slower on 16 threads than faulting in
// (experiments/thread_scaling.md, run 7). Whether a block is mapped follows from
// its own size alone, so its release needs nothing else.
void* fresh_block(size_t rounded) {
  if (rounded < kPopulatedBlockBytes) return std::aligned_alloc(kAlignment, rounded);
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;  // page-aligned, so kAlignment-aligned
  populate_pages(static_cast<char*>(p), rounded);
  return p;
}

void release_block(void* ptr, size_t bytes) noexcept {
  if (bytes < kPopulatedBlockBytes)
    std::free(ptr);
  else
    munmap(ptr, bytes);
}

size_t rounded_size(size_t nbytes) {
  // std::aligned_alloc wants a multiple of the alignment.
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

// Freed blocks by size. A request takes the smallest cached block of at least its
// size if that is at most a quarter larger (oldest first among equals): the
// experts' and the memory's buffers change size a little every step. Bytes are
// counted for cached-size blocks only: `live_` handed out (a block's own size),
// `cached_` held, `peak_` the most ever live. Live + cached stays within the peak
// plus 1/kHeadroom of it. A request that finds no block near its size and would
// pass that takes a cached block up to twice its size instead; failing that, it
// frees the smallest cached block that makes room alone (else the largest, and
// looks again).
//
// Why not simply the oldest blocks, within the peak (the policy before): on
// default at batch 96 a 3 MiB gradient of a new size freed a 192 MiB
// activation, whose next request missed and freed a 96 MiB one, and so on:
// 4.6 GB of fresh pages every step, a third of its time in page faults
// (experiments/roofline.md, "Stop 61").
class BlockCache {
 public:
  void* take(size_t rounded) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t limit = std::max(peak_ + peak_ / kHeadroom, live_ + rounded);
    // Where a fresh block would free a cached one, a cached block up to twice the
    // request serves instead.
    const size_t slack = live_ + cached_ + rounded > limit ? rounded : rounded / kReuseSlack;
    auto fit = blocks_.lower_bound(rounded);
    if (fit != blocks_.end() && fit->first - rounded <= slack && note_size(*fit, rounded))
      return hand_out(fit);
    while (!blocks_.empty() && live_ + cached_ + rounded > limit) {
      auto victim = blocks_.lower_bound(live_ + cached_ + rounded - limit);
      if (victim == blocks_.end()) victim = blocks_.lower_bound(std::prev(blocks_.end())->first);
      const auto [bytes, ptr] = *victim;
      blocks_.erase(victim);
      cached_ -= bytes;
      SHAMN_UNPOISON(ptr, bytes);
      release_block(ptr, bytes);
    }
    return nullptr;
  }

  // A fresh block of `rounded` bytes is now live.
  void note_fresh(size_t rounded) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_ += rounded;
    peak_ = std::max(peak_, live_);
    watermark_ = std::max(watermark_, live_);
  }

  // Caches a freed block of `rounded` requested bytes, or gives it back to the C
  // library when the cache has no memory for its node.
  void put(void* ptr, size_t rounded) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t bytes = rounded;
    if (auto it = oversized_.find(ptr); it != oversized_.end()) {
      bytes = it->second;
      oversized_.erase(it);
    }
    live_ -= bytes;
    try {
      blocks_.emplace(bytes, ptr);  // after its equals: the oldest stays first
    } catch (...) {
      release_block(ptr, bytes);
      return;
    }
    cached_ += bytes;
    SHAMN_POISON(ptr, bytes);
  }

  size_t bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }
  size_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }
  size_t watermark() {
    std::lock_guard<std::mutex> lock(mutex_);
    return watermark_;
  }
  void reset_watermark() {
    std::lock_guard<std::mutex> lock(mutex_);
    watermark_ = live_;
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, ptr] : blocks_) {
      SHAMN_UNPOISON(ptr, bytes);
      release_block(ptr, bytes);
    }
    blocks_.clear();
    cached_ = 0;
    peak_ = live_;
  }

 private:
  void* hand_out(std::multimap<size_t, void*>::iterator block) {
    const auto [bytes, ptr] = *block;
    blocks_.erase(block);
    cached_ -= bytes;
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    watermark_ = std::max(watermark_, live_);
    SHAMN_UNPOISON(ptr, bytes);
    return ptr;
  }

  // Its free will name the requested size: a larger block's own is kept here.
  // False when there is no memory for that.
  bool note_size(const std::pair<const size_t, void*>& block, size_t rounded) {
    if (block.first == rounded) return true;
    try {
      oversized_.emplace(block.second, block.first);
    } catch (...) {
      return false;
    }
    return true;
  }

  // A request takes a cached block at most 1/kReuseSlack larger than itself.
  static constexpr size_t kReuseSlack = 4;
  // On default at batch 96, with none the cache still missed 3.6 GB a step;
  // with 1/32 or 1/16, 0 to 22 MB.
  static constexpr size_t kHeadroom = 32;
  std::mutex mutex_;
  std::multimap<size_t, void*> blocks_;          // cached blocks by size, oldest first among equals
  std::unordered_map<void*, size_t> oversized_;  // live blocks larger than their request
  size_t live_ = 0, cached_ = 0, peak_ = 0;
  size_t watermark_ = 0;  // the most live since reset_watermark (reports; peak_ steers eviction)
};

// Never destroyed: tensors in static objects may be freed after any static cache.
BlockCache& cache() {
  static BlockCache* instance = new BlockCache;
  return *instance;
}

}  // namespace

void* aligned_alloc_bytes(size_t nbytes) {
  // Rounding up a size this close to SIZE_MAX would wrap to a tiny block.
  SHAMN_CHECK(nbytes <= SIZE_MAX - kAlignment, "out of memory allocating ", nbytes, " bytes");
  const size_t rounded = rounded_size(nbytes);
  const bool cached = rounded >= kCachedBlockBytes;
  if (cached)
    if (void* ptr = cache().take(rounded)) return ptr;
  void* ptr = fresh_block(rounded);
  if (ptr == nullptr && cached_block_bytes() > 0) {
    release_cached_blocks();
    ptr = fresh_block(rounded);
  }
  SHAMN_CHECK(ptr != nullptr, "out of memory allocating ", nbytes, " bytes");
  if (cached) cache().note_fresh(rounded);
  return ptr;
}

void aligned_free(void* ptr, size_t nbytes) noexcept {
  if (ptr == nullptr) return;
  const size_t rounded = rounded_size(nbytes);
  if (rounded < kCachedBlockBytes) {
    std::free(ptr);
    return;
  }
  cache().put(ptr, rounded);
}

size_t cached_block_bytes() { return cache().bytes(); }

void release_cached_blocks() { cache().release(); }

size_t live_block_bytes() { return cache().live(); }

size_t peak_live_block_bytes() { return cache().watermark(); }

void reset_peak_live_block_bytes() { cache().reset_watermark(); }

}  // namespace shamn
