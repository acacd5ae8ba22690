// The cache of freed large blocks behind aligned_alloc_bytes.
#include <cstdint>

#include <catch2/catch.hpp>

#include "core/aligned.h"
#include "core/check.h"

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

TEST_CASE("a miss frees the oldest cached blocks only as far as the peak needs", "[core][aligned]") {
  release_cached_blocks();
  const size_t one = kCachedBlockBytes;
  void* a = aligned_alloc_bytes(2 * one);
  void* b = aligned_alloc_bytes(2 * one);
  aligned_free(a, 2 * one);
  aligned_free(b, 2 * one);
  // Live + cached + this request would pass the peak by one block: a (the older) goes.
  void* c = aligned_alloc_bytes(one);
  CHECK(cached_block_bytes() == 2 * one);
  void* d = aligned_alloc_bytes(2 * one);
  CHECK(d == b);
  aligned_free(c, one);
  aligned_free(d, 2 * one);
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
