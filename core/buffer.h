#pragma once
// An uninitialised, 64-byte-aligned array for a kernel's intermediate values.
// std::vector zero-fills (a memset the kernel then overwrites) and goes to the
// C library on every call. A Buffer takes large blocks from aligned_alloc_bytes,
// whose cache hands the same blocks back call after call (no page faults), and
// small ones from a per-thread pool of recently freed blocks: a decode step
// makes dozens of small scratch arrays, and aligned_alloc for each was 4% of
// its instructions.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace shamn {

// The storage behind Buffer (core/buffer.cpp). `bytes` must be the same in both calls.
void* buffer_alloc(size_t bytes);
void buffer_free(void* ptr, size_t bytes) noexcept;
// Throws naming n: a negative count, or one whose bytes overflow size_t (which
// would hand back a tiny block with a huge size()).
[[noreturn]] void buffer_size_error(int64_t n, size_t element_bytes);

template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "a Buffer holds plain values it never constructs");

 public:
  Buffer() = default;
  explicit Buffer(int64_t n) { resize(n); }
  Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { buffer_free(data_, bytes()); }

  // Contents are unspecified afterwards (not kept, not cleared).
  void resize(int64_t n) {
    if (n == size_) return;
    buffer_free(data_, bytes());
    data_ = nullptr;
    size_ = 0;
    if (n < 0 || static_cast<uint64_t>(n) > SIZE_MAX / sizeof(T)) [[unlikely]]
      buffer_size_error(n, sizeof(T));
    data_ = static_cast<T*>(buffer_alloc(static_cast<size_t>(n) * sizeof(T)));
    size_ = n;
  }

  // At least n values: a smaller Buffer is replaced (contents unspecified), a
  // larger one kept, so a loop over pieces of different sizes allocates only
  // when a piece is larger than every one before it.
  void reserve_at_least(int64_t n) {
    if (n > size_) resize(n);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  T& operator[](int64_t i) { return data_[i]; }
  const T& operator[](int64_t i) const { return data_[i]; }

 private:
  size_t bytes() const { return static_cast<size_t>(size_) * sizeof(T); }
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace shamn
