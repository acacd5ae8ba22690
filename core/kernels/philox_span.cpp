#include "core/kernels/philox_span.h"

#include "core/kernel_level.h"
#include "core/kernels/philox_span_isa.h"

namespace shamn {

namespace {
const philox_isa::Kernels* const kLevels[] = {&philox_isa::kernels_scalar, &philox_isa::kernels_avx2,
                                              &philox_isa::kernels_avx512};
}  // namespace

void philox_span(uint64_t first, uint64_t stream, uint64_t seed, uint32_t* words) {
  for_kernel_level(kLevels).span(first, stream, seed, words);
}

}  // namespace shamn
