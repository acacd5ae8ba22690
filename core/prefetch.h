#pragma once
// Software prefetch of a span of memory, one request per 64-byte line: for rows
// read (or written) in an order the hardware prefetchers cannot follow, such as
// rows picked by an index.
#include <cstddef>
#include <cstdint>

namespace shamn {

inline constexpr int64_t kCacheLine = 64;

// Requests the lines of p[0, count) into L1 (for reading, or with `for_write`
// in a state ready to be written).
template <class T>
inline void prefetch_span(const T* p, int64_t count, bool for_write = false) {
  const char* bytes = reinterpret_cast<const char*>(p);
  const int64_t n = count * static_cast<int64_t>(sizeof(T));
  for (int64_t b = 0; b < n; b += kCacheLine) {
    if (for_write)
      __builtin_prefetch(bytes + b, 1, 3);
    else
      __builtin_prefetch(bytes + b, 0, 3);
  }
}

}  // namespace shamn
