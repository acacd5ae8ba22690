#pragma once
// The factor of a LoRA adapter's term, W x + scale * B (A x): alpha / rank, or
// with rank-stabilised LoRA (rsLoRA, Kalajdzievski 2023) alpha / sqrt(rank).
// One definition for training (layers/lora.h), export and the runtime
// (infer/lora_adapter.h), so the three agree to the bit.
#include <cmath>
#include <cstdint>

namespace shamn {

inline double lora_scale(int64_t rank, double alpha, bool rslora) {
  const double r = static_cast<double>(rank);
  return alpha / (rslora ? std::sqrt(r) : r);
}

// What a message prints after "rank R, alpha A" when the scale is rsLoRA's.
inline const char* lora_scale_note(bool rslora) { return rslora ? " (rslora: alpha / sqrt(rank))" : ""; }

}  // namespace shamn
