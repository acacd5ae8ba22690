// The MoE's and the memory's statistics from their selections.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "train/model_analysis.h"

namespace shamn {

namespace {

// -sum p log p over the non-zero shares.
double entropy(const std::vector<double>& share) {
  double h = 0;
  for (double p : share)
    if (p > 0) h -= p * std::log(p);
  return h;
}

}  // namespace

MoeLayerStats moe_stats(int64_t layer, const int32_t* experts, const float* gates, int64_t N, int64_t k,
                        int64_t groups, int64_t experts_per_group) {
  const int64_t X = groups * experts_per_group;
  MoeLayerStats s;
  s.layer = layer;
  s.tokens = N;
  s.k = k;
  std::vector<int64_t> count(static_cast<size_t>(X), 0);
  double first = 0, second = 0;
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const int32_t e = experts[t * k + i];
      SHAMN_CHECK(e >= 0 && e < X, "expert id ", e, " out of range");
      ++count[static_cast<size_t>(e)];
    }
    first += gates[t * k];
    if (k > 1) second += gates[t * k + 1];
  }
  const double selections = static_cast<double>(std::max<int64_t>(1, N * k));
  s.expert_share.resize(static_cast<size_t>(X));
  s.group_share.assign(static_cast<size_t>(groups), 0.0);
  for (int64_t e = 0; e < X; ++e) {
    s.expert_share[e] = static_cast<double>(count[e]) / selections;
    s.group_share[e / experts_per_group] += s.expert_share[e];
    if (count[e] == 0) ++s.never_chosen;
  }
  s.busiest_expert = std::max_element(count.begin(), count.end()) - count.begin();
  s.busiest_share = s.expert_share[s.busiest_expert];
  s.entropy = entropy(s.expert_share);
  s.max_entropy = std::log(static_cast<double>(X));
  s.mean_gate_first = N > 0 ? first / static_cast<double>(N) : 0;
  s.mean_gate_second =
      k > 1 && N > 0 ? second / static_cast<double>(N) : std::numeric_limits<double>::quiet_NaN();
  return s;
}

MemoryLayerStats memory_stats(int64_t layer, const int32_t* slots, const float* weights, int64_t N,
                              int64_t topk, int64_t num_slots) {
  MemoryLayerStats s;
  s.layer = layer;
  s.slots = num_slots;
  s.reads = N * topk;
  s.slot_reads.assign(static_cast<size_t>(num_slots), 0);
  double margin = 0;
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t m = 0; m < topk; ++m) {
      const int32_t slot = slots[t * topk + m];
      SHAMN_CHECK(slot >= 0 && slot < num_slots, "memory slot ", slot, " out of range");
      ++s.slot_reads[static_cast<size_t>(slot)];
    }
    // The weights are a softmax of the scores: score_1 - score_k = log(w_1 / w_k).
    margin += std::log(static_cast<double>(weights[t * topk]) / weights[t * topk + topk - 1]);
  }
  s.mean_margin = N > 0 ? margin / static_cast<double>(N) : 0;
  std::vector<int64_t> sorted = s.slot_reads;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const auto top = static_cast<size_t>((num_slots + 99) / 100);
  const double reads = static_cast<double>(std::max<int64_t>(1, s.reads));
  s.top1pct_share =
      static_cast<double>(std::accumulate(sorted.begin(), sorted.begin() + top, int64_t{0})) / reads;
  std::vector<double> share(static_cast<size_t>(num_slots));
  for (int64_t i = 0; i < num_slots; ++i) {
    share[i] = static_cast<double>(s.slot_reads[i]) / reads;
    if (s.slot_reads[i] > 0) ++s.slots_read;
  }
  s.entropy = entropy(share);
  s.max_entropy = std::log(static_cast<double>(num_slots));
  return s;
}

}  // namespace shamn
