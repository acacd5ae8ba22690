// Hash-bucket sharing in the embedding, and the loss by token frequency.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "core/check.h"
#include "train/model_analysis.h"

namespace shamn {

EmbeddingStats embedding_stats(const Tensor& bucket_index, int64_t buckets) {
  SHAMN_CHECK(bucket_index.dtype() == DType::i32 && bucket_index.dim() == 2,
              "bucket_index must be int32 [V, h]");
  EmbeddingStats s;
  s.vocab = bucket_index.shape()[0];
  s.hashes = bucket_index.shape()[1];
  s.buckets = buckets;
  const int32_t* idx = bucket_index.data<int32_t>();
  std::vector<int64_t> per_bucket(static_cast<size_t>(buckets), 0);
  std::map<std::vector<int32_t>, int64_t> tuples;  // sorted bucket tuple -> tokens
  for (int64_t t = 0; t < s.vocab; ++t) {
    std::vector<int32_t> tuple(idx + t * s.hashes, idx + (t + 1) * s.hashes);
    for (int32_t b : tuple) {
      SHAMN_CHECK(b >= 0 && b < buckets, "bucket index ", b, " out of range");
      ++per_bucket[static_cast<size_t>(b)];
    }
    std::sort(tuple.begin(), tuple.end());
    ++tuples[tuple];
  }
  s.tokens_per_bucket_mean = static_cast<double>(s.vocab * s.hashes) / static_cast<double>(buckets);
  s.tokens_per_bucket_max = *std::max_element(per_bucket.begin(), per_bucket.end());
  s.empty_buckets = std::count(per_bucket.begin(), per_bucket.end(), int64_t{0});
  for (const auto& [tuple, c] : tuples) s.colliding_pairs += c * (c - 1) / 2;
  const double pairs = static_cast<double>(s.vocab) * static_cast<double>(s.vocab - 1) / 2;
  s.colliding_pair_share = pairs > 0 ? static_cast<double>(s.colliding_pairs) / pairs : 0;
  return s;
}

std::vector<FrequencyThird> frequency_thirds(const std::vector<int64_t>& counts,
                                             const std::vector<double>& losses,
                                             const std::vector<int32_t>& targets) {
  SHAMN_CHECK(losses.size() == targets.size(), "one loss per target");
  // The token types that occur, rarest first (ties by id, so the cut is fixed).
  std::vector<int32_t> types;
  for (size_t t = 0; t < counts.size(); ++t)
    if (counts[t] > 0) types.push_back(static_cast<int32_t>(t));
  std::stable_sort(types.begin(), types.end(), [&](int32_t a, int32_t b) { return counts[a] < counts[b]; });
  std::vector<int> third_of(counts.size(), -1);
  std::vector<FrequencyThird> out = {{"rare"}, {"middle"}, {"frequent"}};
  const auto n = static_cast<int64_t>(types.size());
  for (int64_t i = 0; i < n; ++i) {
    const int third = static_cast<int>(i * 3 / n);
    const int32_t t = types[i];
    third_of[t] = third;
    FrequencyThird& f = out[third];
    if (f.types == 0) f.min_count = counts[t];
    f.max_count = counts[t];
    ++f.types;
  }
  std::vector<double> sum(3, 0.0);
  for (size_t i = 0; i < targets.size(); ++i) {
    const int32_t t = targets[i];
    const int third = t >= 0 && static_cast<size_t>(t) < third_of.size() ? third_of[t] : -1;
    SHAMN_CHECK(third >= 0, "target token ", t, " does not occur in the counts");
    sum[third] += losses[i];
    ++out[third].targets;
  }
  for (int i = 0; i < 3; ++i)
    out[i].loss = out[i].targets > 0 ? sum[i] / static_cast<double>(out[i].targets)
                                     : std::numeric_limits<double>::quiet_NaN();
  return out;
}

}  // namespace shamn
