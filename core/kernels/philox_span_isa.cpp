// philox_span, compiled once per SIMD level (core/isa.h). Each round of
// Philox4x32-10 takes the high and low halves of two 32 x 32-bit products a
// block; the vector levels form them for every lane at once (vpmuludq gives
// the even lanes' 64-bit products, a shift brings the odd lanes to it).
#include <array>

#include "core/intrinsics.h"
#include "core/isa.h"
#include "core/kernels/philox_span.h"
#include "core/kernels/philox_span_isa.h"
#include "core/rng.h"

SHAMN_ISA_BEGIN
namespace {

#if SHAMN_ISA_SIMD >= 1
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#endif

#if SHAMN_ISA_SIMD == 2
using U = __m512i;  // 16 lanes
constexpr int kLanes = 16;
inline U load(const uint32_t* p) { return _mm512_loadu_si512(p); }
inline void store(uint32_t* p, U v) { _mm512_storeu_si512(p, v); }
inline U splat(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
inline U bxor(U a, U b) { return _mm512_xor_si512(a, b); }
inline U mullo(U a, U m) { return _mm512_mullo_epi32(a, m); }
inline U mulhi(U a, U m) {
  const U even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
  const U odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  return _mm512_mask_blend_epi32(0xAAAA, even, odd);
}
#elif SHAMN_ISA_SIMD == 1
using U = __m256i;  // 8 lanes
constexpr int kLanes = 8;
inline U load(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store(uint32_t* p, U v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline U splat(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
inline U bxor(U a, U b) { return _mm256_xor_si256(a, b); }
inline U mullo(U a, U m) { return _mm256_mullo_epi32(a, m); }
inline U mulhi(U a, U m) {
  const U even = _mm256_srli_epi64(_mm256_mul_epu32(a, m), 32);
  const U odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  return _mm256_blend_epi32(even, odd, 0xAA);
}
#endif

void span(uint64_t first, uint64_t stream, uint64_t seed, uint32_t* words) {
#if SHAMN_ISA_SIMD >= 1
  // words' four rows of 16 start as the counters' and the stream's halves.
  for (int l = 0; l < kPhiloxSpanBlocks; ++l) {
    const uint64_t counter = first + static_cast<uint64_t>(l);
    words[l] = static_cast<uint32_t>(counter);
    words[16 + l] = static_cast<uint32_t>(counter >> 32);
    words[32 + l] = static_cast<uint32_t>(stream);
    words[48 + l] = static_cast<uint32_t>(stream >> 32);
  }
  const U m0 = splat(kMul0), m1 = splat(kMul1);
  for (int at = 0; at < kPhiloxSpanBlocks; at += kLanes) {
    U c0 = load(words + at), c1 = load(words + 16 + at), c2 = load(words + 32 + at),
      c3 = load(words + 48 + at);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const U hi0 = mulhi(c0, m0), lo0 = mullo(c0, m0);
      const U hi1 = mulhi(c2, m1), lo1 = mullo(c2, m1);
      c0 = bxor(bxor(hi1, c1), splat(k0));
      c1 = lo1;
      c2 = bxor(bxor(hi0, c3), splat(k1));
      c3 = lo0;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    store(words + at, c0);
    store(words + 16 + at, c1);
    store(words + 32 + at, c2);
    store(words + 48 + at, c3);
  }
#else
  for (int l = 0; l < kPhiloxSpanBlocks; ++l) {
    const std::array<uint32_t, 4> w = philox4x32(first + static_cast<uint64_t>(l), stream, seed);
    for (int j = 0; j < 4; ++j) words[16 * j + l] = w[static_cast<size_t>(j)];
  }
#endif
}

}  // namespace
SHAMN_ISA_END

namespace shamn::philox_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::span};
}  // namespace shamn::philox_isa
