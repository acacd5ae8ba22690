#include "core/bf16.h"

#include "core/parallel.h"

namespace shamn {
namespace {

// Values per task: the rounding is a few integer ops per value, so a task
// needs many to outweigh its scheduling.
constexpr int64_t kRoundGrain = int64_t{1} << 16;

}  // namespace

void round_to_bf16(float* dst, const float* src, int64_t n) {
  parallel_for(0, n, kRoundGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = round_to_bf16(src[i]);
  });
}

std::vector<float> rounded_copy(const float* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) round_to_bf16(out.data() + r * cols, src + r * ld, cols);
  return out;
}

}  // namespace shamn
