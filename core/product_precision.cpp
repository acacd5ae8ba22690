#include "core/product_precision.h"

#include <atomic>

#include "core/check.h"
#include "core/kernel_level.h"
#include "core/machine_probe_bf16.h"

namespace shamn {
namespace {

std::atomic<ProductPrecision>& current_precision() {
  static std::atomic<ProductPrecision> precision{ProductPrecision::f32};
  return precision;
}

std::atomic<bool>& native_allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

}  // namespace

const char* product_precision_name(ProductPrecision p) {
  return p == ProductPrecision::bf16 ? "bf16" : "f32";
}

ProductPrecision product_precision_from_string(const std::string& name, const std::string& what) {
  if (name == "f32") return ProductPrecision::f32;
  SHAMN_INPUT_CHECK(name == "bf16", what, ": '", name, "' is unknown: use \"f32\" or \"bf16\"");
  return ProductPrecision::bf16;
}

ProductPrecision product_precision() { return current_precision().load(std::memory_order_relaxed); }

bool bf16_dot_native() {
  static const bool supported = bf16_dot_supported();
  return supported && kernel_level() == KernelLevel::avx512 &&
         native_allowed().load(std::memory_order_relaxed);
}

void allow_bf16_dot_native(bool allowed) { native_allowed().store(allowed, std::memory_order_relaxed); }

void set_product_precision(ProductPrecision p) { current_precision().store(p, std::memory_order_relaxed); }

}  // namespace shamn
