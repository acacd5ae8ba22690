#pragma once
// Happens-before edges for ThreadSanitizer where the synchronisation lives in a
// library it cannot see. libtbb is not built with TSan, so the waits that make a
// tbb::parallel_for return only after every task has finished are invisible to
// it, and every read of a kernel's output after the loop would be reported as a
// race. parallel_for (core/parallel.h) marks the fork and the join with these;
// races between two tasks of one loop are still reported. No-ops outside a
// -DSHAMN_SANITIZE=thread build.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace shamn::detail {

// Everything this thread did before is visible to whoever acquires `sync` later.
inline void tsan_release([[maybe_unused]] void* sync) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(sync);
#endif
}

// Everything done before any tsan_release(sync) is visible to this thread.
inline void tsan_acquire([[maybe_unused]] void* sync) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(sync);
#endif
}

}  // namespace shamn::detail
