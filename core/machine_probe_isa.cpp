// The machine-limit probes, compiled once per SIMD level (core/isa.h): the FMA
// peak and the read bandwidth as the kernels of that level can reach them.
#include "core/machine_probe_isa.h"
#include "core/simd.h"

SHAMN_ISA_BEGIN
namespace {

using simd::Vec;

// Twelve chains hide an FMA latency of up to 6 cycles at two FMAs per cycle, and
// twelve accumulators plus two operands fit AVX2's sixteen registers.
constexpr int kFmaChains = 12;
// Eight accumulators keep the adds off the critical path of the loads.
constexpr int kReadChains = 8;

// The sum of every lane of acc[0..n): one value that depends on all of them.
float lane_total(const Vec* acc, int n) {
  Vec total = acc[0];
  for (int c = 1; c < n; ++c) total = simd::vadd(total, acc[c]);
  float lanes[simd::kVec];
  simd::vstoreu(lanes, total);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

float fma_loop(int64_t iters, float seed, double* flops) {
  Vec acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = simd::vsplat(seed + static_cast<float>(c));
  // acc = acc * m + a stays finite for any number of rounds: |m| < 1.
  const Vec m = simd::vsplat(0.999f), a = simd::vsplat(1e-3f);
  // Rounding keeps the compiler from folding the rounds into fewer.
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kFmaChains; ++c) acc[c] = simd::vfma(acc[c], m, a);
  *flops = 2.0 * simd::kVec * kFmaChains * static_cast<double>(iters);
  return lane_total(acc, kFmaChains);
}

float read_sum(const float* x, int64_t n) {
  Vec acc[kReadChains];
  for (Vec& v : acc) v = simd::vzero();
  for (int64_t i = 0; i < n; i += kReadChains * simd::kVec)
    for (int c = 0; c < kReadChains; ++c) acc[c] = simd::vadd(acc[c], simd::vloadu(x + i + c * simd::kVec));
  return lane_total(acc, kReadChains);
}

void add_into(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += simd::kVec)
    simd::vstoreu(y + i, simd::vadd(simd::vloadu(y + i), simd::vloadu(x + i)));
}

}  // namespace
SHAMN_ISA_END

namespace shamn::machine_probe_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::fma_loop, &::shamn::SHAMN_ISA_NS::read_sum,
                            &::shamn::SHAMN_ISA_NS::add_into};
}  // namespace shamn::machine_probe_isa
