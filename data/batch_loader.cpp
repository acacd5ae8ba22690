#include "data/batch_loader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"

namespace shamn {
namespace {

// XOR keeps distinct batch indices on distinct Philox streams, away from the small
// stream numbers other users of the same seed pick.
constexpr uint64_t kSamplerStreams = 0x5348414D4E444154ull;  // "SHAMNDAT"

// Below this many tokens per task, starting a task costs more than copying.
constexpr int64_t kTokensPerTask = 16384;

void check_batch_shape(const TokenFile& file, int64_t batch, int64_t seq) {
  SHAMN_INPUT_CHECK(batch > 0 && seq > 0, "batch (", batch, ") and seq (", seq, ") must be > 0");
  SHAMN_INPUT_CHECK(file.size() >= seq + 1, "token file '", file.path(), "' has ", file.size(),
                    " tokens, fewer than one window of seq + 1 = ", seq + 1, " tokens");
}

void check_vocab(int64_t vocab_size) {
  SHAMN_INPUT_CHECK(vocab_size > 0, "vocab_size (", vocab_size, ") must be > 0");
}

// inputs row r = tokens[s, s+T), targets row r = tokens[s+1, s+T+1) for s = starts[r].
Batch assemble(const TokenFile& file, int64_t vocab, int64_t B, int64_t T, const std::vector<int64_t>& starts,
               uint64_t index) {
  Batch out{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32), index};
  int32_t* inputs = out.inputs.data<int32_t>();
  int32_t* targets = out.targets.data<int32_t>();
  std::vector<int64_t> first_bad(static_cast<size_t>(B), -1);
  file.check_unchanged();
  parallel_for(0, B, std::max<int64_t>(1, kTokensPerTask / (T + 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int32_t* x = inputs + r * T;
      int32_t* y = targets + r * T;
      const int64_t s = starts[static_cast<size_t>(r)];
      int64_t bad = file.copy_checked(s, T, vocab, x);
      if (bad < 0) bad = file.copy_checked(s + T, 1, vocab, y + T - 1);
      std::memcpy(y, x + 1, static_cast<size_t>(T - 1) * sizeof(int32_t));
      first_bad[static_cast<size_t>(r)] = bad;
    }
  });
  // Reported in row order, so the message does not depend on which task ran first.
  for (int64_t bad : first_bad)
    if (bad >= 0) file.throw_bad_token(bad, vocab);
  return out;
}

}  // namespace

std::vector<int64_t> random_window_starts(uint64_t seed, uint64_t index, int64_t batch, int64_t num_starts) {
  SHAMN_CHECK(batch > 0 && num_starts > 0, "random_window_starts: batch ", batch, ", num_starts ",
              num_starts);
  Rng rng(seed, index ^ kSamplerStreams);
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  for (int64_t& s : starts) s = static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_starts)));
  return starts;
}

BatchLoader::BatchLoader(std::shared_ptr<const TokenFile> file, int64_t vocab_size, int64_t batch,
                         int64_t seq, uint64_t seed, bool prefetch)
    : file_(std::move(file)), vocab_(vocab_size), batch_(batch), seq_(seq), seed_(seed), prefetch_(prefetch) {
  SHAMN_CHECK(file_ != nullptr, "BatchLoader needs a token file");
  check_vocab(vocab_);
  check_batch_shape(*file_, batch_, seq_);
  if (prefetch_) {
    worker_ = std::thread(&BatchLoader::prefetch_loop, this);
    request(0);
  }
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Batch BatchLoader::build(uint64_t index) const {
  return assemble(*file_, vocab_, batch_, seq_,
                  random_window_starts(seed_, index, batch_, file_->size() - seq_), index);
}

void BatchLoader::request(uint64_t index) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.reset();
    requested_ = index;
  }
  changed_.notify_all();
}

void BatchLoader::prefetch_loop() {
  set_profile_thread_name("batch prefetch");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || requested_.has_value(); });
    if (stop_) return;
    Slot slot;
    slot.index = *requested_;
    requested_.reset();
    building_ = true;
    lock.unlock();
    // Nothing may escape this thread (that would terminate the process): next()
    // rethrows the error on the caller's thread.
    try {
      const ProfileScope profile("batch_prefetch", ProfileCategory::data);
      slot.batch = build(slot.index);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    building_ = false;
    ready_ = std::move(slot);
    changed_.notify_all();
  }
}

Batch BatchLoader::next() {
  std::optional<Slot> slot;
  if (prefetch_) {
    std::unique_lock<std::mutex> lock(mutex_);
    // A request the worker has not picked up yet is built here instead: waking a
    // sleeping thread can take longer than building the batch (tens of microseconds
    // on an idle VM). Otherwise wait for the build under way.
    requested_.reset();
    changed_.wait(lock, [&] { return !building_; });
    slot = std::move(ready_);
    ready_.reset();
  }
  Batch batch;
  if (slot && slot->index == position_) {
    if (slot->error) std::rethrow_exception(slot->error);
    batch = std::move(*slot->batch);
  } else {
    batch = build(position_);
  }
  position_ = shared_position(position_ + 1);
  if (prefetch_) request(position_);
  return batch;
}

void BatchLoader::wait_prefetched() {
  SHAMN_CHECK(prefetch_, "BatchLoader::wait_prefetched on a loader without a prefetch thread");
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return ready_.has_value() && ready_->index == position_; });
}

void BatchLoader::seek(uint64_t position) {
  position_ = shared_position(position);
  if (prefetch_) request(position_);
}

void BatchLoader::share(uint64_t base, uint64_t period, uint64_t first, uint64_t count) {
  SHAMN_CHECK(period >= 1 && count >= 1 && first + count <= period, "BatchLoader::share: batches [", first,
              ", ", first + count, ") of every ", period);
  share_base_ = base;
  share_period_ = period;
  share_first_ = first;
  share_count_ = count;
  seek(position_);
}

uint64_t BatchLoader::shared_position(uint64_t position) const {
  if (position < share_base_) position = share_base_;
  const uint64_t offset = (position - share_base_) % share_period_;
  if (offset < share_first_) return position + (share_first_ - offset);
  if (offset >= share_first_ + share_count_) return position + (share_period_ - offset) + share_first_;
  return position;
}

int64_t sequential_batch_count(const TokenFile& file, int64_t batch, int64_t seq) {
  check_batch_shape(file, batch, seq);
  const int64_t windows = (file.size() - 1) / seq;
  SHAMN_INPUT_CHECK(windows >= batch, "token file '", file.path(), "' has ", file.size(),
                    " tokens: ", windows, " windows of seq + 1 = ", seq + 1,
                    " tokens, fewer than one batch of ", batch);
  return windows / batch;
}

Batch sequential_batch(const TokenFile& file, int64_t vocab_size, int64_t batch, int64_t seq, int64_t index) {
  check_vocab(vocab_size);
  const int64_t count = sequential_batch_count(file, batch, seq);
  SHAMN_CHECK(index >= 0 && index < count, "sequential batch ", index, " of '", file.path(),
              "' does not exist (", count, " batches)");
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  for (int64_t r = 0; r < batch; ++r) starts[static_cast<size_t>(r)] = (index * batch + r) * seq;
  return assemble(file, vocab_size, batch, seq, starts, static_cast<uint64_t>(index));
}

}  // namespace shamn
