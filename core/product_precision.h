#pragma once
// The precision of the operands of the training products (matmuls and
// block-sparse linears), like PyTorch's autocast: one choice for the whole
// process, made by the trainer from train.precision.
//
// f32: operands as they are. bf16: each operand rounded to bfloat16 (round to
// nearest even) before the product, every product of two bf16 values exact in
// f32, the sums accumulated in f32 in a fixed order. The block-sparse products
// add each pair of products as AVX512_BF16's vdpbf16ps does (the higher k
// first) and run on that instruction where the CPU has it, elsewhere on f32
// FMAs in the same order (core/kernels/block_sparse_simd.h); the matmuls run
// the f32 kernels on rounded operands. So a bf16 run gives the same numbers at
// any thread count and kernel level, on any CPU, unless a block-sparse operand
// or partial sum is denormal (vdpbf16ps reads and writes those as zero).
// Master weights, gradients, AdamW state and every other op stay f32.
#include <string>

namespace shamn {

enum class ProductPrecision { f32 = 0, bf16 = 1 };

const char* product_precision_name(ProductPrecision p);
// "f32" | "bf16"; throws InputError naming `what` on any other name.
ProductPrecision product_precision_from_string(const std::string& name, const std::string& what);

// The precision in use. Process-wide; reading it is one relaxed atomic load.
ProductPrecision product_precision();
void set_product_precision(ProductPrecision p);

// Whether the bf16 block-sparse products run on vdpbf16ps: where the CPU has
// AVX512_BF16 and the avx512 kernel level is in use, unless turned off (tests
// compare it with the f32 emulation, which gives the same bits).
bool bf16_dot_native();
void allow_bf16_dot_native(bool allowed);

// Sets a precision for a scope and restores the previous one.
class ScopedProductPrecision {
 public:
  explicit ScopedProductPrecision(ProductPrecision p) : saved_(product_precision()) {
    set_product_precision(p);
  }
  ~ScopedProductPrecision() { set_product_precision(saved_); }
  ScopedProductPrecision(const ScopedProductPrecision&) = delete;
  ScopedProductPrecision& operator=(const ScopedProductPrecision&) = delete;

 private:
  ProductPrecision saved_;
};

}  // namespace shamn
