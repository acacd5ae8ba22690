#pragma once
// Internal to the block-sparse kernels: reusable per-thread packing buffers.
//
// Each thread keeps one aligned buffer per role and grows it on demand, so packing
// does not page-fault fresh memory on every call. TBB may run an unrelated task
// (which may itself call these kernels) on a thread that waits inside parallel_for
// while its buffer is leased; such a nested lease gets a private allocation instead
// of clobbering the outer one.
#include <cstddef>

#include "core/aligned.h"

namespace shamn::bsr {

struct ScratchSlot {
  float* ptr = nullptr;
  size_t cap = 0;  // floats
  bool busy = false;
  ~ScratchSlot() { aligned_free(ptr); }
};

class ScratchLease {
 public:
  // `floats` plus one cache line of slack, 64-byte aligned.
  ScratchLease(ScratchSlot& slot, size_t floats) {
    const size_t n = floats + 16;
    if (slot.busy) {
      own_ = static_cast<float*>(aligned_alloc_bytes(n * sizeof(float)));
      ptr_ = own_;
      return;
    }
    if (slot.cap < n) {
      aligned_free(slot.ptr);
      slot.ptr = nullptr;
      slot.cap = 0;
      slot.ptr = static_cast<float*>(aligned_alloc_bytes(n * sizeof(float)));
      slot.cap = n;
    }
    slot.busy = true;
    slot_ = &slot;
    ptr_ = slot.ptr;
  }
  ~ScratchLease() {
    if (slot_) slot_->busy = false;
    aligned_free(own_);
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  float* get() const { return ptr_; }

 private:
  ScratchSlot* slot_ = nullptr;
  float* own_ = nullptr;
  float* ptr_ = nullptr;
};

}  // namespace shamn::bsr
