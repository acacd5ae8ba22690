#pragma once
// Training and evaluation batches cut from a token file.
//
// Training: an endless stream of batches; batch i holds B windows of T+1 tokens whose
// starts are drawn uniformly from [0, size - T - 1] by Philox keyed on (seed, i), so
// batch i is a pure function of (file, seed, B, T, i): independent of the thread count,
// of prefetching, and of where a run was stopped and resumed (position() is all a
// checkpoint needs). A background thread builds batch position() + 1 while the caller
// trains on the current one. One caller thread drives next() and seek().
//
// Evaluation: the file cut into consecutive, non-overlapping windows of T+1 tokens
// (window j starts at j*T), B windows per batch, in order; only full batches.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/token_file.h"

namespace shamn {

struct Batch {
  Tensor inputs;       // [B, T] i32: tokens[s, s+T)
  Tensor targets;      // [B, T] i32: tokens[s+1, s+T+1)
  uint64_t index = 0;  // which batch of the stream this is
};

// The B window starts of training batch `index`, each uniform in [0, num_starts).
std::vector<int64_t> random_window_starts(uint64_t seed, uint64_t index, int64_t batch, int64_t num_starts);

class BatchLoader {
 public:
  // Throws InputError if vocab_size, batch or seq is <= 0 or the file is shorter than
  // one window of seq + 1 tokens.
  BatchLoader(std::shared_ptr<const TokenFile> file, int64_t vocab_size, int64_t batch, int64_t seq,
              uint64_t seed, bool prefetch = true);
  ~BatchLoader();  // stops and joins the prefetch thread
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Returns batch position(), then advances. A bad token (>= vocab_size) throws
  // InputError naming the file and offset, here on the caller's thread even when the
  // prefetch thread found it; the position then stays put.
  Batch next();
  uint64_t position() const { return position_; }  // batches handed out so far
  void seek(uint64_t position);                    // the next batch is number `position`
  // Data-parallel training: of every `period` consecutive batches counted from
  // `base`, this loader hands out only those at offsets [first, first + count),
  // skipping the others' (position() then jumps over them). The default is every batch.
  void share(uint64_t base, uint64_t period, uint64_t first, uint64_t count);
  // Blocks until the prefetch thread has finished batch position() (or hit its
  // error); for tests that must see the error come from that thread.
  void wait_prefetched();

  const TokenFile& file() const { return *file_; }

 private:
  Batch build(uint64_t index) const;
  void request(uint64_t index);
  void prefetch_loop();

  std::shared_ptr<const TokenFile> file_;
  int64_t vocab_, batch_, seq_;
  uint64_t seed_;
  bool prefetch_;
  uint64_t position_ = 0;
  uint64_t share_base_ = 0, share_period_ = 1, share_first_ = 0, share_count_ = 1;
  uint64_t shared_position(uint64_t position) const;  // the first position this loader hands out

  // Prefetch state, guarded by mutex_: at most one request and one finished batch.
  struct Slot {
    uint64_t index = 0;
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<uint64_t> requested_;
  bool building_ = false;
  bool stop_ = false;
  std::optional<Slot> ready_;
  std::thread worker_;  // last: started once everything above is initialised
};

// Throws InputError if the file holds fewer than one batch of windows.
int64_t sequential_batch_count(const TokenFile& file, int64_t batch, int64_t seq);
// Batch `index` in [0, sequential_batch_count).
Batch sequential_batch(const TokenFile& file, int64_t vocab_size, int64_t batch, int64_t seq, int64_t index);

}  // namespace shamn
