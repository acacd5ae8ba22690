#pragma once
// The precision of the operands of the training products (matmuls and
// block-sparse linears), like PyTorch's autocast: one choice for the whole
// process, made by the trainer from train.precision.
//
// f32: operands as they are. bf16: each operand rounded to bfloat16 (round to
// nearest even, kept in a float) before the product, every product of two
// bf16 values exact in f32, the sums accumulated in f32 by the same kernels in
// the same order. So a bf16 run gives the same numbers at any thread count and
// kernel level, on any CPU. Master weights, gradients, AdamW state and every
// other op stay f32.
#include <string>

namespace shamn {

enum class ProductPrecision { f32 = 0, bf16 = 1 };

const char* product_precision_name(ProductPrecision p);
// "f32" | "bf16"; throws InputError naming `what` on any other name.
ProductPrecision product_precision_from_string(const std::string& name, const std::string& what);

// The precision in use. Process-wide; reading it is one relaxed atomic load.
ProductPrecision product_precision();
void set_product_precision(ProductPrecision p);

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
