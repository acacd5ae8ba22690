#include "core/kernels/moe_routing.h"

#include "core/check.h"

namespace shamn {

void moe_dispatch_plan(int32_t* order, int32_t* row, int64_t* offsets, const int32_t* experts, int64_t n,
                       int64_t k, int64_t X) {
  std::fill(offsets, offsets + X + 1, 0);
  for (int64_t s = 0; s < n * k; ++s) {
    SHAMN_CHECK(experts[s] >= 0 && experts[s] < X, "expert id ", experts[s], " out of range [0, ", X, ")");
    ++offsets[experts[s] + 1];
  }
  for (int64_t e = 0; e < X; ++e) offsets[e + 1] += offsets[e];
  // A counting sort: tokens keep their order within an expert.
  std::vector<int64_t> next(offsets, offsets + X);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < k; ++i) {
      const int64_t r = next[experts[t * k + i]]++;
      row[t * k + i] = static_cast<int32_t>(r);
      order[r] = static_cast<int32_t>(t);
    }
}

}  // namespace shamn
