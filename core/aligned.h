#pragma once
#include <cstddef>

namespace shamn {

// Every tensor buffer starts on a cache line, so SIMD loads of a row start aligned
// and two threads never share the first line of each other's buffers.
inline constexpr size_t kAlignment = 64;

// Zero-size requests return a valid, unique, aligned pointer. Throws shamn::Error
// (naming the size) when memory runs out.
//
// Blocks of kCachedBlockBytes or more are not returned to the C library when freed
// but kept, by size, for the next request of the same size: a training step
// allocates the same activation sizes every step, and fresh pages would otherwise
// fault and be cleared by the kernel each time. A request that finds no block of
// its size frees the oldest cached blocks as far as needed to keep live plus cached
// bytes within the largest live footprint reached so far: the cache never raises
// the peak.
void* aligned_alloc_bytes(size_t nbytes);
// `nbytes` must be the size passed to aligned_alloc_bytes.
void aligned_free(void* ptr, size_t nbytes) noexcept;

inline constexpr size_t kCachedBlockBytes = size_t{256} << 10;

// Bytes held in the cache of freed blocks (tests, memory reports).
size_t cached_block_bytes();
// Returns every cached block to the C library.
void release_cached_blocks();

// Bytes of blocks of kCachedBlockBytes or more handed out and not yet freed
// (what tensors and large buffers hold, the cache aside), and the most of them
// at any moment since the last reset_peak_live_block_bytes (memory reports).
size_t live_block_bytes();
size_t peak_live_block_bytes();
void reset_peak_live_block_bytes();

}  // namespace shamn
