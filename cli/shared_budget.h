#pragma once
// A bound on something many requests hold at once (the server's logprobs
// values): a request takes its share up front or is refused, and gives it back
// when the last copy of its handle goes, however its response ends.
#include <atomic>
#include <cstdint>
#include <memory>

namespace shamn::cli {

class SharedBudget {
 public:
  explicit SharedBudget(int64_t limit) : limit_(limit) {}

  // A handle holding n units, or null where n more would pass the limit
  // (n = 0: an empty handle, never refused).
  std::shared_ptr<const void> take(int64_t n) {
    if (n <= 0) return std::make_shared<const int>(0);
    int64_t held = held_->load();
    do {
      if (n > limit_ - held) return nullptr;
    } while (!held_->compare_exchange_weak(held, held + n));
    // The count outlives the budget's owner should a response end after it.
    return std::shared_ptr<const void>(held_.get(), [count = held_, n](const void*) { count->fetch_sub(n); });
  }
  int64_t held() const { return held_->load(); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::shared_ptr<std::atomic<int64_t>> held_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace shamn::cli
