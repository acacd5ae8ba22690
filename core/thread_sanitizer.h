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
// the next body, returns from its own loop, or leaves the arena (an observer,
// core/thread_sanitizer.cpp; TSan aborts when a thread exits with accesses
// ignored, and a worker leaves its arena before it can exit). What it skips is
// oneTBB's code between our bodies.
#if defined(__SANITIZE_THREAD__)
inline thread_local bool tsan_in_bookkeeping = false;
#endif

inline void tsan_begin_bookkeeping() {
#if defined(__SANITIZE_THREAD__)
  if (!tsan_in_bookkeeping) {
    __tsan_ignore_thread_begin();
    tsan_in_bookkeeping = true;
  }
#endif
}

inline void tsan_end_bookkeeping() {
#if defined(__SANITIZE_THREAD__)
  if (tsan_in_bookkeeping) {
    __tsan_ignore_thread_end();
    tsan_in_bookkeeping = false;
  }
#endif
}

// Whether this thread is between a task body's end and its next one (always
// false outside a TSan build).
inline bool tsan_in_bookkeeping_span() {
#if defined(__SANITIZE_THREAD__)
  return tsan_in_bookkeeping;
#else
  return false;
#endif
}

// Before this thread starts its first loop: the observer that ends the span of
// every worker leaving this thread's arena (each application thread has an
// arena of its own).
#if defined(__SANITIZE_THREAD__)
void tsan_observe_arena();
#else
inline void tsan_observe_arena() {}
#endif

// Around one task body: acquires the fork and ends the span on entry; releases
// the join and opens the span on exit, also when the body throws.
class TsanTaskBody {
 public:
  TsanTaskBody([[maybe_unused]] void* fork_sync, [[maybe_unused]] void* join_sync)
#if defined(__SANITIZE_THREAD__)
      : join_sync_(join_sync)
#endif
  {
    tsan_end_bookkeeping();
    tsan_acquire(fork_sync);
  }
  ~TsanTaskBody() {
#if defined(__SANITIZE_THREAD__)
    tsan_release(join_sync_);
#endif
    tsan_begin_bookkeeping();
  }
  TsanTaskBody(const TsanTaskBody&) = delete;
  TsanTaskBody& operator=(const TsanTaskBody&) = delete;

 private:
#if defined(__SANITIZE_THREAD__)
  void* join_sync_;
#endif
};

// Around the caller's loop: on return or throw, ends the caller's span and
// acquires the join (every task's writes before the caller's next step).
class TsanLoopJoin {
 public:
  explicit TsanLoopJoin([[maybe_unused]] void* join_sync)
#if defined(__SANITIZE_THREAD__)
      : join_sync_(join_sync)
#endif
  {
  }
  ~TsanLoopJoin() {
    tsan_end_bookkeeping();
#if defined(__SANITIZE_THREAD__)
    tsan_acquire(join_sync_);
#endif
  }
  TsanLoopJoin(const TsanLoopJoin&) = delete;
  TsanLoopJoin& operator=(const TsanLoopJoin&) = delete;

 private:
#if defined(__SANITIZE_THREAD__)
  void* join_sync_;
#endif
};

}  // namespace shamn::detail
