#include "core/heap_policy.h"

#include <cstdlib>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shamn {

namespace {

// Whether the user set the allocator's own variables, which then decide.
bool allocator_set_by_user() {
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

}  // namespace

void keep_freed_memory_in_process() {
#if defined(__GLIBC__)
  if (allocator_set_by_user()) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

void keep_at_most_freed_per_arena(int bytes) {
#if defined(__GLIBC__)
  if (allocator_set_by_user()) return;
  mallopt(M_TRIM_THRESHOLD, bytes);
#else
  (void)bytes;
#endif
}

}  // namespace shamn
