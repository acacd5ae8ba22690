#include "core/thread_sanitizer.h"

#if defined(__SANITIZE_THREAD__)
#include <tbb/task_scheduler_observer.h>

namespace shamn::detail {
namespace {

// Ends the bookkeeping span of a thread leaving the arena (a worker out of work,
// or recalled); oneTBB calls it on that thread.
class EndBookkeepingOnLeave : public tbb::task_scheduler_observer {
 public:
  EndBookkeepingOnLeave() { observe(true); }
  void on_scheduler_exit(bool /*is_worker*/) override { tsan_end_bookkeeping(); }
};

}  // namespace

void tsan_observe_arena() {
  // Never destroyed: observe(false) unlinks an observer without calling it, so
  // a worker still in the arena when this thread exits would leave it unended.
  thread_local bool observing = false;
  if (observing) return;
  new EndBookkeepingOnLeave();  // kept for the process
  observing = true;
}

}  // namespace shamn::detail
#endif
