#include "core/aligned.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/check.h"

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

size_t rounded_size(size_t nbytes) {
  // std::aligned_alloc wants a multiple of the alignment.
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

// Freed blocks by size, reused oldest first among equals. Bytes are counted for
// cached-size blocks only: `live_` handed out, `cached_` held, `peak_` the most
// ever live. A request that misses evicts the oldest cached blocks only as far as
// live + cached + request would pass that peak, so the cache never makes the
// process hold more than the largest live footprint it had (and only that).
class BlockCache {
 public:
  void* take(size_t rounded) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto hit = by_size_.find(rounded);
    if (hit != by_size_.end()) {
      const uint64_t age = hit->second;
      void* ptr = by_age_[age].ptr;
      by_age_.erase(age);
      by_size_.erase(hit);
      cached_ -= rounded;
      live_ += rounded;
      watermark_ = std::max(watermark_, live_);
      SHAMN_UNPOISON(ptr, rounded);
      return ptr;
    }
    const size_t limit = std::max(peak_, live_ + rounded);
    while (!by_age_.empty() && live_ + cached_ + rounded > limit) {
      auto oldest = by_age_.begin();
      const Entry e = oldest->second;
      SHAMN_UNPOISON(e.ptr, e.bytes);
      std::free(e.ptr);
      cached_ -= e.bytes;
      auto range = by_size_.equal_range(e.bytes);
      for (auto it = range.first; it != range.second; ++it)
        if (it->second == oldest->first) {
          by_size_.erase(it);
          break;
        }
      by_age_.erase(oldest);
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

  void put(void* ptr, size_t rounded) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t age = next_age_++;
    auto sized = by_size_.emplace(rounded, age);
    try {
      by_age_.emplace(age, Entry{ptr, rounded});
    } catch (...) {
      by_size_.erase(sized);
      throw;
    }
    cached_ += rounded;
    live_ -= rounded;
    SHAMN_POISON(ptr, rounded);
  }

  // The block could not be cached: it goes back to the C library.
  void note_freed(size_t rounded) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_ -= rounded;
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
    for (auto& [age, e] : by_age_) {
      SHAMN_UNPOISON(e.ptr, e.bytes);
      std::free(e.ptr);
    }
    by_age_.clear();
    by_size_.clear();
    cached_ = 0;
    peak_ = live_;
  }

 private:
  struct Entry {
    void* ptr;
    size_t bytes;
  };
  std::mutex mutex_;
  std::map<uint64_t, Entry> by_age_;
  std::multimap<size_t, uint64_t> by_size_;
  uint64_t next_age_ = 0;
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
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  if (ptr == nullptr && cached_block_bytes() > 0) {
    release_cached_blocks();
    ptr = std::aligned_alloc(kAlignment, rounded);
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
  try {
    cache().put(ptr, rounded);
  } catch (...) {  // no memory for the map nodes: give the block back instead
    std::free(ptr);
    cache().note_freed(rounded);
  }
}

size_t cached_block_bytes() { return cache().bytes(); }

void release_cached_blocks() { cache().release(); }

size_t live_block_bytes() { return cache().live(); }

size_t peak_live_block_bytes() { return cache().watermark(); }

void reset_peak_live_block_bytes() { cache().reset_watermark(); }

}  // namespace shamn
