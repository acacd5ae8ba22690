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
// In libtsan, not declared by GCC 12's header: every memory access of the
// calling thread is ignored from begin to end (its synchronisation is not).
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
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

// oneTBB's bookkeeping between task bodies. The thread that finishes a loop's
// last task decrements the loop's wait node, which lives on the stack of the
// thread that started the loop; that thread's later use of the same stack (a
// deeper call of its own, or another task it runs while it waits) is ordered
// after the decrement only by libtbb's wait, so TSan reports it. A thread
// ignores its own memory accesses from the end of a task body until it starts
// the next body or returns from its own loop: what it skips is oneTBB's code,
// never ours. A worker may sit in that span until it exits, and TSan aborts
// when a thread exits with accesses ignored, so the span also ends with the
// thread (C++ thread_local destructors run before TSan's own thread-exit
// work, a pthread key destructor).
#if defined(__SANITIZE_THREAD__)
struct TsanBookkeepingSpan {
  bool open = false;
  TsanBookkeepingSpan() = default;
  ~TsanBookkeepingSpan() {
    if (open) __tsan_ignore_thread_end();
  }
  TsanBookkeepingSpan(const TsanBookkeepingSpan&) = delete;
  TsanBookkeepingSpan& operator=(const TsanBookkeepingSpan&) = delete;
};
inline thread_local TsanBookkeepingSpan tsan_bookkeeping;
#endif

inline void tsan_begin_bookkeeping() {
#if defined(__SANITIZE_THREAD__)
  if (!tsan_bookkeeping.open) {
    __tsan_ignore_thread_begin();
    tsan_bookkeeping.open = true;
  }
#endif
}

inline void tsan_end_bookkeeping() {
#if defined(__SANITIZE_THREAD__)
  if (tsan_bookkeeping.open) {
    __tsan_ignore_thread_end();
    tsan_bookkeeping.open = false;
  }
#endif
}

// Whether this thread is between a task body's end and its next one (always
// false outside a TSan build).
inline bool tsan_in_bookkeeping_span() {
#if defined(__SANITIZE_THREAD__)
  return tsan_bookkeeping.open;
#else
  return false;
#endif
}

// Ends this thread's bookkeeping span when its own loop returns or throws.
class TsanEndBookkeeping {
 public:
  TsanEndBookkeeping() = default;
  ~TsanEndBookkeeping() { tsan_end_bookkeeping(); }
  TsanEndBookkeeping(const TsanEndBookkeeping&) = delete;
  TsanEndBookkeeping& operator=(const TsanEndBookkeeping&) = delete;
};

}  // namespace shamn::detail
