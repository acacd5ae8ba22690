#pragma once
// An uninitialised, 64-byte-aligned array for a kernel's intermediate values.
// std::vector zero-fills (a memset the kernel then overwrites), and its large
// blocks come fresh from the OS on every call; a Buffer takes its memory from
// aligned_alloc_bytes, whose cache hands the same large blocks back call after
// call, so a forward pass neither clears nor page-faults its activations.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/aligned.h"

namespace shamn {

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
  ~Buffer() { aligned_free(data_, bytes()); }

  // Contents are unspecified afterwards (not kept, not cleared).
  void resize(int64_t n) {
    if (n == size_) return;
    aligned_free(data_, bytes());
    data_ = nullptr;
    size_ = 0;
    data_ = static_cast<T*>(aligned_alloc_bytes(static_cast<size_t>(n) * sizeof(T)));
    size_ = n;
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
