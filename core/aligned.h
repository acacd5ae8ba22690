#pragma once
#include <cstddef>

namespace shamn {

// Every tensor buffer starts on a cache line, so SIMD loads of a row start aligned
// and two threads never share the first line of each other's buffers.
inline constexpr size_t kAlignment = 64;

// Zero-size requests return a valid, unique, aligned pointer. Throws shamn::Error
// (naming the size) when memory runs out.
void* aligned_alloc_bytes(size_t nbytes);
void aligned_free(void* ptr) noexcept;

}  // namespace shamn
