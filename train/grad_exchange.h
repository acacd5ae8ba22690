#pragma once
// Data-parallel training: every rank's gradients summed over the ranks, so each
// holds the step's full gradient and takes the same AdamW step.
//
// The gradients travel in buckets of about bucket_floats floats, filled in
// reverse parameter order (the order a backward pass completes them). With
// overlap, a bucket's sum starts as soon as its last gradient is final, while the
// backward pass goes on (as PyTorch's DDP does), and polling between backward
// nodes moves the sums in flight on; finish() waits for what is left. Without,
// every bucket is sent after the backward pass. Each element is summed in
// Communicator::sum_tree's fixed order either way, so the bits do not depend on
// the bucketing, the overlap or the timing.
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "autograd/variable.h"
#include "train/communicator.h"

namespace shamn {

class GradientExchange {
 public:
  explicit GradientExchange(const std::vector<NamedVar>& params, size_t bucket_floats = size_t{1} << 20);

  // The whole exchange after the backward pass: begin(), every parameter ready,
  // finish(). Rank 0 first waits for every rank (timed apart as wait_for_ranks).
  void sum_over_ranks(Communicator& comm);

  // The exchange in pieces, for overlap: begin() before this rank's last backward
  // pass of the step; ready(i) when parameter i's gradient is final on this rank;
  // poll() as often as convenient; finish() after the backward pass.
  void begin(Communicator& comm);
  void ready(size_t index);
  void poll();
  // Packs the parameters not reported ready, waits for every bucket's sum and
  // unpacks. A parameter with a gradient on any rank then holds the sum on every
  // rank (zeros stood in where a rank had none), so all ranks agree on which
  // parameters AdamW updates; one with none anywhere stays without.
  void finish();

  // The parameter's position in the list given to the constructor.
  std::optional<size_t> index_of(const Var& v) const;
  int64_t bytes_per_step() const { return bytes_; }  // bytes summed in the last exchange
  // At most 4,096 (the exchange's tags), however small bucket_floats is.
  size_t bucket_count() const { return buckets_.size(); }

 private:
  // A bucket's buffer holds its parameters' gradients, then one flag per parameter
  // (1 where this rank has a gradient), summed with them: a flag's sum counts the
  // ranks that had one, exactly.
  struct Bucket {
    std::vector<size_t> params;
    std::vector<size_t> offsets;
    size_t floats = 0;  // gradients only
    std::vector<float> data;
    size_t waiting = 0;  // parameters not packed yet this step
    std::unique_ptr<PendingSum> sum;
  };
  void pack(size_t index);
  void unpack(Bucket& b);

  std::vector<Var> params_;
  std::unordered_map<const VarImpl*, size_t> index_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;
  std::vector<uint8_t> packed_;
  Communicator* comm_ = nullptr;  // set by begin(), until finish()
  int64_t bytes_ = 0;
};

}  // namespace shamn
