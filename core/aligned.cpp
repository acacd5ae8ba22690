#include "core/aligned.h"

#include <cstdlib>
#include <new>

#include "core/check.h"

namespace shamn {

void* aligned_alloc_bytes(size_t nbytes) {
  // std::aligned_alloc wants a multiple of the alignment.
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  SHAMN_CHECK(ptr != nullptr, "out of memory allocating ", nbytes, " bytes");
  return ptr;
}

void aligned_free(void* ptr) noexcept { std::free(ptr); }

}  // namespace shamn
