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
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/bf16.h"
#include "core/buffer.h"

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

// What a product reads of its n-value operand x: x itself, or (float operands
// under bf16) x rounded into buf. Doubles (gradient checks) are never rounded.
template <class T>
const T* product_operand(const T* x, int64_t n, Buffer<T>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    if (product_precision() == ProductPrecision::bf16) {
      buf.reserve_at_least(n);
      round_to_bf16(buf.data(), x, n);
      return buf.data();
    }
  }
  return x;
}

}  // namespace shamn
