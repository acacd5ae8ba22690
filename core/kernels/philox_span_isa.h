#pragma once
// Internal to core/kernels: philox_span of one SIMD level (philox_span_isa.cpp,
// compiled per level; see core/isa.h).
#include <cstdint>

namespace shamn::philox_isa {

struct Kernels {
  void (*span)(uint64_t first, uint64_t stream, uint64_t seed, uint32_t* words);
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::philox_isa
