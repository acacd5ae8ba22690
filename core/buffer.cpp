#include "core/buffer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <vector>

#include "core/aligned.h"
#include "core/check.h"

namespace shamn {

namespace {

// Small blocks by power-of-two size class, 64 bytes up to just below the size
// aligned_alloc_bytes caches itself.
constexpr int kMinClass = 6;                                      // 64 bytes
constexpr int kMaxClass = std::bit_width(kCachedBlockBytes) - 2;  // 128 KiB
constexpr size_t kKeptPerClass = 16;                              // at most ~4 MiB held per thread

int size_class(size_t bytes) {
  const size_t rounded = std::max(bytes, size_t{1} << kMinClass);
  return static_cast<int>(std::bit_width(rounded - 1));  // the smallest c with 2^c >= bytes
}

// Blocks freed on this thread, for the next request of their class. A block
// freed on another thread than the one that took it joins that thread's pool.
struct Pool {
  std::array<std::vector<void*>, kMaxClass + 1> free;
  ~Pool() {
    for (size_t c = 0; c < free.size(); ++c)
      for (void* p : free[c]) aligned_free(p, size_t{1} << c);
  }
};

Pool& pool() {
  thread_local Pool p;
  return p;
}

}  // namespace

void buffer_size_error(int64_t n, size_t element_bytes) {
  detail::throw_check_failure("n >= 0 && n * element_bytes <= SIZE_MAX", __FILE__, __LINE__,
                              detail::concat("Buffer of ", n, " values of ", element_bytes,
                                             " bytes: the count is negative or its bytes overflow"));
}

void* buffer_alloc(size_t bytes) {
  const int c = size_class(bytes);
  if (c > kMaxClass) return aligned_alloc_bytes(bytes);
  std::vector<void*>& blocks = pool().free[static_cast<size_t>(c)];
  if (!blocks.empty()) {
    void* p = blocks.back();
    blocks.pop_back();
    return p;
  }
  return aligned_alloc_bytes(size_t{1} << c);
}

void buffer_free(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  const int c = size_class(bytes);
  if (c > kMaxClass) {
    aligned_free(ptr, bytes);
    return;
  }
  std::vector<void*>& blocks = pool().free[static_cast<size_t>(c)];
  if (blocks.size() < kKeptPerClass) {
    try {
      blocks.push_back(ptr);
      return;
    } catch (...) {  // no memory for the list: give the block back instead
    }
  }
  aligned_free(ptr, size_t{1} << c);
}

}  // namespace shamn
