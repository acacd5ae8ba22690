#pragma once
// Internal to core/kernels: the product-key selection's inner loops, one copy
// per SIMD level (product_key_isa.cpp, compiled per level; see core/isa.h).
// Exact comparisons and integer counts: every level gives the same result.
#include <cstdint>

namespace shamn::product_key_isa {

struct Scored {
  float s;  // ranked score (never NaN)
  int32_t id;
};

// rank_select counts kRankLanes entries at a time in vector lanes.
inline constexpr int64_t kRankLanes = 16;

struct Kernels {
  // Writes the k best of buf[0..m) to out[0..k), best first (higher score, then
  // the lower id), by counting for each entry how many entries rank above it;
  // out[k] is scratch (the entries that rank lower are written there). keys
  // is scratch for m ranks rounded up to whole lane groups.
  void (*rank_select)(const Scored* buf, int64_t m, int64_t k, Scored* out, int64_t* keys);
  // The scores above bar, with their indices, in index order: buf[0..m), m returned.
  int64_t (*compact_above)(const float* score, int64_t n, float bar, Scored* buf);
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::product_key_isa
