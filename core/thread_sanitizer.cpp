#include "core/thread_sanitizer.h"

#if defined(__SANITIZE_THREAD__)
#include <tbb/task_scheduler_observer.h>

namespace shamn::detail {
namespace {

// A worker that leaves the arena ends its bookkeeping span: a thread that exits
// while TSan ignores its accesses is reported (and would lose our next body).
class EndBookkeepingOnExit : public tbb::task_scheduler_observer {
 public:
  EndBookkeepingOnExit() { observe(true); }
  ~EndBookkeepingOnExit() override { observe(false); }
  void on_scheduler_exit(bool /*is_worker*/) override { tsan_end_bookkeeping(); }
};

}  // namespace

void tsan_observe_arena() { static thread_local EndBookkeepingOnExit observer; }

}  // namespace shamn::detail
#endif
