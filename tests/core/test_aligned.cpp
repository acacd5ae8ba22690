// The cache of freed large blocks behind aligned_alloc_bytes.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/aligned.h"
#include "core/check.h"
#include "core/parallel.h"
#include "helpers.h"

using namespace shamn;

TEST_CASE("a freed large block is reused for the same size", "[core][aligned]") {
  release_cached_blocks();
  const size_t big = kCachedBlockBytes * 3 + 100;
  void* a = aligned_alloc_bytes(big);
  CHECK(reinterpret_cast<uintptr_t>(a) % kAlignment == 0);
  aligned_free(a, big);
  CHECK(cached_block_bytes() >= big);
  void* b = aligned_alloc_bytes(big);
  CHECK(b == a);
  CHECK(cached_block_bytes() == 0);
  aligned_free(b, big);
  release_cached_blocks();
  CHECK(cached_block_bytes() == 0);
}

TEST_CASE("small blocks bypass the cache", "[core][aligned]") {
  release_cached_blocks();
  void* a = aligned_alloc_bytes(1000);
  aligned_free(a, 1000);
  CHECK(cached_block_bytes() == 0);
}

TEST_CASE("a request of a new size frees cached blocks rather than pass the peak", "[core][aligned]") {
  release_cached_blocks();
  const size_t one = kCachedBlockBytes, two = 2 * kCachedBlockBytes;
  void* a = aligned_alloc_bytes(one);
  void* b = aligned_alloc_bytes(one);
  aligned_free(a, one);
  aligned_free(b, one);
  REQUIRE(cached_block_bytes() == 2 * one);
  // No cached block has this size, and 3.5 x one would pass the peak of 2 x one.
  void* c = aligned_alloc_bytes(one + one / 2);
  CHECK(cached_block_bytes() == 0);
  aligned_free(c, one + one / 2);
  void* d = aligned_alloc_bytes(two);  // frees the 1.5 x block, leaving nothing
  CHECK(cached_block_bytes() == 0);
  aligned_free(d, two);
  release_cached_blocks();
}

TEST_CASE("a request takes a cached block up to a quarter larger, and its free caches all of it",
          "[core][aligned]") {
  release_cached_blocks();
  const size_t one = kCachedBlockBytes;
  const size_t live0 = live_block_bytes();
  void* x = aligned_alloc_bytes(16 * one);
  aligned_free(x, 16 * one);
  void* s = aligned_alloc_bytes(one);  // frees x: the cache now holds less than the peak
  REQUIRE(cached_block_bytes() == 0);
  void* a = aligned_alloc_bytes(4 * one);
  aligned_free(a, 4 * one);
  aligned_free(s, one);
  void* b = aligned_alloc_bytes(3 * one + one / 2);
  CHECK(b == a);
  CHECK(live_block_bytes() == live0 + 4 * one);  // the block's own size
  aligned_free(b, 3 * one + one / 2);
  CHECK(cached_block_bytes() == 5 * one);
  CHECK(live_block_bytes() == live0);
  // a is twice this request, and there is room below the peak: a fresh block.
  void* c = aligned_alloc_bytes(2 * one);
  CHECK(c != a);
  CHECK(cached_block_bytes() == 5 * one);
  aligned_free(c, 2 * one);
  release_cached_blocks();
}

TEST_CASE("where a fresh block would pass the peak, a cached block up to twice the request serves",
          "[core][aligned]") {
  release_cached_blocks();
  const size_t one = kCachedBlockBytes;
  const size_t live0 = live_block_bytes();
  void* a = aligned_alloc_bytes(4 * one);
  aligned_free(a, 4 * one);
  void* b = aligned_alloc_bytes(2 * one);
  CHECK(b == a);
  CHECK(cached_block_bytes() == 0);
  aligned_free(b, 2 * one);
  CHECK(cached_block_bytes() == 4 * one);
  CHECK(live_block_bytes() == live0);
  release_cached_blocks();
}

TEST_CASE("a miss frees the smallest cached block that makes room, not the oldest", "[core][aligned]") {
  release_cached_blocks();
  const size_t one = kCachedBlockBytes;
  // Peak 33.5 blocks, so the cache may hold about one block more than that.
  void* big = aligned_alloc_bytes(32 * one);
  void* mid = aligned_alloc_bytes(one + one / 2);
  aligned_free(big, 32 * one);  // the oldest
  aligned_free(mid, one + one / 2);
  // No block near 2.5 blocks, and 36 would pass 33.5 + 33.5 / 32 by about 1.45:
  // the 1.5-block one makes that room alone.
  void* c = aligned_alloc_bytes(2 * one + one / 2);
  CHECK(cached_block_bytes() == 32 * one);
  void* d = aligned_alloc_bytes(32 * one);
  CHECK(d == big);
  aligned_free(c, 2 * one + one / 2);
  aligned_free(d, 32 * one);
  release_cached_blocks();
}

TEST_CASE("a size that would wrap when rounded up is out of memory, not a tiny block", "[core][aligned]") {
  CHECK_THROWS_WITH(aligned_alloc_bytes(SIZE_MAX), Catch::Contains("out of memory"));
  CHECK_THROWS_AS(aligned_alloc_bytes(SIZE_MAX - 10), Error);
}

TEST_CASE("live block bytes count large blocks handed out, and their peak since a reset", "[core][aligned]") {
  const size_t big = kCachedBlockBytes * 3;
  const size_t live0 = live_block_bytes();
  reset_peak_live_block_bytes();
  CHECK(peak_live_block_bytes() == live0);
  void* a = aligned_alloc_bytes(big);
  void* b = aligned_alloc_bytes(big);
  void* small = aligned_alloc_bytes(1024);  // below the cached size: not counted
  CHECK(live_block_bytes() == live0 + 2 * big);
  aligned_free(b, big);
  CHECK(live_block_bytes() == live0 + big);
  CHECK(peak_live_block_bytes() == live0 + 2 * big);
  reset_peak_live_block_bytes();
  CHECK(peak_live_block_bytes() == live0 + big);
  void* c = aligned_alloc_bytes(big);  // reuses b's cached block: live again all the same
  CHECK(live_block_bytes() == live0 + 2 * big);
  CHECK(peak_live_block_bytes() == live0 + 2 * big);
  aligned_free(a, big);
  aligned_free(c, big);
  aligned_free(small, 1024);
  CHECK(live_block_bytes() == live0);
}

// Pages of [p, p + bytes) not resident in memory now.
static size_t pages_not_resident(void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  REQUIRE(mincore(p, bytes, in_core.data()) == 0);
  return static_cast<size_t>(
      std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return !(c & 1); }));
}

TEST_CASE("a fresh block of kPopulatedBlockBytes or more has every page mapped before its first write",
          "[core][aligned]") {
  if (kPopulatedBlockBytes == SIZE_MAX) return;  // the sanitizer builds keep the C library's blocks
  {
    // Before Linux 5.14 the kernel cannot populate (the blocks then fault in at
    // their first writes, which is allowed): nothing to check there.
    const long page = sysconf(_SC_PAGESIZE);
    void* probe =
        mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(probe != MAP_FAILED);
    const bool can_populate = madvise(probe, static_cast<size_t>(page), MADV_POPULATE_WRITE) == 0;
    munmap(probe, static_cast<size_t>(page));
    if (!can_populate) {
      WARN("madvise(MADV_POPULATE_WRITE) is not supported by this kernel: not checked");
      return;
    }
  }
  const test::ThreadCountGuard restore;
  // Its slices are populated by the pool's threads, also where the request comes
  // from inside a parallel loop's task.
  const int threads = GENERATE(1, 2, 4);
  const bool nested = GENERATE(false, true);
  CAPTURE(threads, nested);
  set_num_threads(threads);
  release_cached_blocks();
  const size_t big = kPopulatedBlockBytes + 3 * 4096 + 64;
  std::vector<void*> blocks(nested ? 2 : 1);
  parallel_for(0, static_cast<int64_t>(blocks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) blocks[static_cast<size_t>(i)] = aligned_alloc_bytes(big);
  });
  for (void* a : blocks) {
    CHECK(reinterpret_cast<uintptr_t>(a) % kAlignment == 0);
    CHECK(pages_not_resident(a, big) == 0);
    static_cast<char*>(a)[big - 1] = 1;  // the whole block is usable
    aligned_free(a, big);
  }
  release_cached_blocks();
  CHECK(cached_block_bytes() == 0);
}

TEST_CASE("a mapped block handed to a smaller request goes back to the kernel by its own size",
          "[core][aligned]") {
  if (kPopulatedBlockBytes == SIZE_MAX) return;  // the sanitizer builds keep the C library's blocks
  release_cached_blocks();
  // Mapped (over the threshold), then taken by a request under it (within a
  // quarter): its free caches it at its own size, and its release unmaps it
  // rather than hand the C library a block it never made (which aborts).
  const size_t mapped = kPopulatedBlockBytes + kPopulatedBlockBytes / 16, under = kPopulatedBlockBytes - 64;
  void* a = aligned_alloc_bytes(mapped);
  aligned_free(a, mapped);
  void* b = aligned_alloc_bytes(under);
  REQUIRE(b == a);
  static_cast<char*>(b)[under - 1] = 1;
  aligned_free(b, under);
  CHECK(cached_block_bytes() == mapped);
  release_cached_blocks();
  CHECK(cached_block_bytes() == 0);
}

TEST_CASE("a block the kernel cannot map is out of memory, naming its size", "[core][aligned]") {
  // AddressSanitizer aborts on a request this large instead of failing it.
  if (kPopulatedBlockBytes == SIZE_MAX) return;
  CHECK_THROWS_WITH(aligned_alloc_bytes(size_t{1} << 52), Catch::Contains("out of memory allocating"));
}
