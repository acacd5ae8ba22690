#include "core/machine_probe_bf16.h"

#include "core/check.h"
#include "core/kernel_level.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SHAMN_HAVE_BF16_PROBE 1
#else
#define SHAMN_HAVE_BF16_PROBE 0
#endif

namespace shamn {

#if SHAMN_HAVE_BF16_PROBE
namespace {

constexpr int kChains = 12;  // as the f32 probe: hides the latency at two per cycle

// Named *_avx512 so tests/layering/isa_objects.sh knows its zmm code is meant.

// CPUID leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16.
bool cpu_has_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> 5) & 1u;
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_loop_avx512(int64_t iters, double* flops) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  // Small operands keep the sums finite however long the loop runs.
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  *flops = 64.0 * kChains * static_cast<double>(iters);
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps warns (bug 105593).
  float lanes[16];
  _mm512_storeu_ps(lanes, total);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

}  // namespace

bool bf16_dot_supported() { return kernel_level_supported(KernelLevel::avx512) && cpu_has_avx512_bf16(); }

float bf16_dot_loop(int64_t iters, double* flops) {
  SHAMN_CHECK(bf16_dot_supported(), "bf16_dot_loop: this CPU has no AVX512_BF16");
  return bf16_loop_avx512(iters, flops);
}
#else
bool bf16_dot_supported() { return false; }

float bf16_dot_loop(int64_t, double*) {
  SHAMN_CHECK(false, "bf16_dot_loop: not built for this CPU family");
  return 0;
}
#endif

}  // namespace shamn
