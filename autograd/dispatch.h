#pragma once
// Runs f(T{}) with T the floating scalar type of `dtype` (float or double).
#include "core/check.h"
#include "core/dtype.h"

namespace shamn {

template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  SHAMN_CHECK(is_floating(dtype), op, ": needs a f32 or f64 tensor, got ", dtype_name(dtype));
  if (dtype == DType::f64) return f(double{});
  return f(float{});
}

}  // namespace shamn
