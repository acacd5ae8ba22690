#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
// Output block i of a stream is a pure function of (seed, stream, i), so a tensor
// can be filled in parallel with the same numbers whatever the thread count, and
// the generator's whole state is two integers (saved in checkpoints).
#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace shamn {

std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t stream, uint64_t seed);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) : seed_(seed), stream_(stream) {}

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }  // blocks of 4 x 32 bits consumed
  void set_offset(uint64_t offset) { offset_ = offset; }

  std::array<uint32_t, 4> next_block() { return philox4x32(offset_++, stream_, seed_); }
  uint64_t next_u64();
  double uniform();            // [0, 1), 53 bits
  uint64_t below(uint64_t n);  // uniform in [0, n), unbiased; n > 0
  double normal(double mean = 0.0, double stddev = 1.0);

  // Fill a f32/f64 tensor: element i uses block offset + i/4, word i%4.
  // Consumes ceil(numel / 4) blocks.
  void fill_uniform(Tensor& t, double lo, double hi);
  void fill_normal(Tensor& t, double mean, double stddev);

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t offset_ = 0;
};

}  // namespace shamn
