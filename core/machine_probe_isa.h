#pragma once
// Internal to core/machine_limits.cpp: the probes of one SIMD level
// (machine_probe_isa.cpp, compiled per level; see core/isa.h).
#include <cstdint>

namespace shamn::machine_probe_isa {

struct Kernels {
  // `iters` rounds of kFmaChains independent fused multiply-adds on full registers;
  // returns a value that depends on every one (so none is left out) and writes
  // the FLOPs done to *flops.
  float (*fma_loop)(int64_t iters, float seed, double* flops);
  // The sum of x[0..n), n a multiple of 256, read with full-register loads.
  float (*read_sum)(const float* x, int64_t n);
  // y[0..n) += x[0..n), n as for read_sum: a stream that writes as much as it reads.
  void (*add_into)(float* y, const float* x, int64_t n);
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::machine_probe_isa
