#pragma once
// Reusable per-thread float buffers for kernels' packed operands. Each thread
// keeps one slot per role (a thread_local ScratchSlot) and grows it on demand, so
// packing does not page-fault fresh memory on every call. oneTBB may run an
// unrelated task (which may itself call the same kernel) on a thread that waits
// inside parallel_for while its slot is leased; such a nested lease gets a
// private allocation instead of clobbering the outer one.
#include <cstddef>

#include "core/aligned.h"

namespace shamn {

struct ScratchSlot {
  float* ptr = nullptr;
  size_t cap = 0;  // floats
  bool busy = false;
  ~ScratchSlot() { aligned_free(ptr, cap * sizeof(float)); }
};

// At least `floats` floats, 64-byte aligned, until the lease ends.
class ScratchLease {
 public:
  ScratchLease(ScratchSlot& slot, size_t floats) {
    if (slot.busy) {
      own_ = static_cast<float*>(aligned_alloc_bytes(floats * sizeof(float)));
      own_floats_ = floats;
      ptr_ = own_;
      return;
    }
    if (slot.cap < floats) {
      aligned_free(slot.ptr, slot.cap * sizeof(float));
      slot.ptr = nullptr;
      slot.cap = 0;
      slot.ptr = static_cast<float*>(aligned_alloc_bytes(floats * sizeof(float)));
      slot.cap = floats;
    }
    slot.busy = true;
    slot_ = &slot;
    ptr_ = slot.ptr;
  }
  ~ScratchLease() {
    if (slot_) slot_->busy = false;
    aligned_free(own_, own_floats_ * sizeof(float));
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  float* get() const { return ptr_; }

 private:
  ScratchSlot* slot_ = nullptr;
  float* own_ = nullptr;
  size_t own_floats_ = 0;
  float* ptr_ = nullptr;
};

}  // namespace shamn
