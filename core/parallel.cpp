#include "core/parallel.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include <tbb/global_control.h>
#include <tbb/info.h>

#include "core/check.h"

namespace shamn {
namespace {
std::mutex g_mutex;
std::unique_ptr<tbb::global_control> g_control;
std::atomic<int> g_threads{0};  // 0: not set yet, i.e. every core
}  // namespace

int hardware_threads() {
  int n = tbb::info::default_concurrency();
  return n > 0 ? n : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void set_num_threads(int n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (n <= 0) n = hardware_threads();
  g_control.reset();
  g_control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                    static_cast<size_t>(n));
  g_threads = n;
}

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : hardware_threads();
}

}  // namespace shamn
