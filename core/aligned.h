#pragma once
#include <cstddef>
#include <cstdint>

namespace shamn {

// Every tensor buffer starts on a cache line, so SIMD loads of a row start aligned
// and two threads never share the first line of each other's buffers.
inline constexpr size_t kAlignment = 64;

// Zero-size requests return a valid, unique, aligned pointer. Throws shamn::Error
// (naming the size) when memory runs out.
//
// Blocks of kCachedBlockBytes or more are not given back (to the C library or the kernel) when freed
// but kept, by size, for the next request of that size or a little less (a
// quarter at most): a training step allocates the same activation sizes every
// step, and fresh pages would otherwise fault and be cleared by the kernel each
// time. Live plus cached bytes stay within the largest live footprint reached so
// far plus 1/32 of it: a request that would pass that takes a cached block up to
// twice its size, else frees cached blocks (the smallest that is enough, else the
// largest first) as far as needed.
void* aligned_alloc_bytes(size_t nbytes);
// `nbytes` must be the size passed to aligned_alloc_bytes.
void aligned_free(void* ptr, size_t nbytes) noexcept;

inline constexpr size_t kCachedBlockBytes = size_t{256} << 10;

// Blocks of this many bytes or more come from the kernel (mmap) with every page
// already populated, by the pool's threads, rather than faulted in at their first
// writes. The sanitizer builds keep the C library's blocks, whose bounds their
// checks know.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr size_t kPopulatedBlockBytes = SIZE_MAX;
#else
inline constexpr size_t kPopulatedBlockBytes = size_t{32} << 20;
#endif

// Bytes held in the cache of freed blocks (tests, memory reports).
size_t cached_block_bytes();
// Returns every cached block: to the C library, or unmapped where it was mapped.
void release_cached_blocks();

// Bytes of blocks of kCachedBlockBytes or more handed out and not yet freed
// (what tensors and large buffers hold, the cache aside), and the most of them
// at any moment since the last reset_peak_live_block_bytes (memory reports).
size_t live_block_bytes();
size_t peak_live_block_bytes();
void reset_peak_live_block_bytes();

}  // namespace shamn
