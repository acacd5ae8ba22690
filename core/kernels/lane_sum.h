#pragma once
// A sum of n terms in a fixed order that does not wait on one add per term.
#include <cstdint>

namespace shamn {

// sum over i < n of term(i) in 16 fixed lanes (term i in lane i % 16), the
// lanes then added left to right: the order of the runtime's RMSNorm
// (infer/infer_model.cpp), so an f32 model normalises a row to the same bits in
// training and inference. One running sum was a chain of n dependent adds (its
// latency, not the loads, set this op's speed).
template <class T, class Term>
T lane_sum(int64_t n, Term term) {
  constexpr int64_t kLanes = 16;
  T lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(i + l);
  for (; i < n; ++i) lanes[i % kLanes] += term(i);
  T sum = lanes[0];
  for (int64_t l = 1; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

}  // namespace shamn
