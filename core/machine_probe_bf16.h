#pragma once
// Internal to core/ (machine_limits.cpp, product_precision.cpp): the bf16 dot-product probe (AVX512_BF16's
// vdpbf16ps), built for that target alone and run only where the CPU has it.
#include <cstdint>

namespace shamn {

// Whether this CPU (and its OS) runs AVX512_BF16 instructions.
bool bf16_dot_supported();

// `iters` rounds of independent vdpbf16ps chains (each: 16 lanes x 2 bf16
// products, 64 FLOPs); writes the FLOPs to *flops and returns a value that
// depends on every one. Only call where bf16_dot_supported().
float bf16_dot_loop(int64_t iters, double* flops);

}  // namespace shamn
