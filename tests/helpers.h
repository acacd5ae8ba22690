#pragma once
// Shared test helpers: seeded random tensors and gradcheck wrappers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace shamn::test {

inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f64, double lo = -1.0,
                            double hi = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  Rng rng(seed, 99);
  rng.fill_uniform(t, lo, hi);
  return t;
}

inline Tensor random_indices(const Shape& shape, int32_t num_rows, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::i32);
  Rng rng(seed, 98);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(num_rows)));
  return t;
}

// n floats uniform in [-1, 1).
inline std::vector<float> uniform_floats(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  Rng rng(seed, 97);
  for (float& x : v) x = static_cast<float>(rng.uniform() * 2.0 - 1.0);
  return v;
}

// The same size and the same bits (NaN payloads and signs of zero included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A running maximum of errors, where a NaN error counts as infinite: std::max(m,
// NaN) is m, so a NaN output would pass every tolerance check.
inline double worse(double so_far, double error) {
  return std::isnan(error) ? std::numeric_limits<double>::infinity() : std::max(so_far, error);
}

// Largest |a[i] - b[i]| over two tensors of the same size (any dtypes); a NaN on
// either side makes it infinite.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  double m = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) m = worse(m, std::abs(a.item(i) - b.item(i)));
  return m;
}

// check_gradients' float stage: a step of 1e-2 (float's round-off), relative
// 2e-2, and each input's atol 2% of its largest gradient within [2e-4, 5e-3]
// (with a fixed 5e-3, a mean-over-positions loss's gradient off by 10% passed).
inline GradcheckOptions float_gradcheck_options(std::vector<bool> skip = {}) {
  GradcheckOptions o;
  o.eps = 1e-2;
  o.rtol = 2e-2;
  o.atol = 5e-3;
  o.atol_fraction = 2e-2;
  o.atol_floor = 2e-4;
  o.skip = std::move(skip);
  return o;
}

// Gradient check in double (tight) and then in float (loose, through the f32 kernels).
inline void check_gradients(const GradcheckFn& f, const std::vector<Tensor>& inputs_f64,
                            std::vector<bool> skip = {}) {
  GradcheckOptions f64_opts;
  f64_opts.skip = skip;
  {
    const GradcheckResult r64 = gradcheck(f, inputs_f64, f64_opts);
    INFO("f64: " << r64.report << " (max abs err " << r64.max_abs_error << ")");
    CHECK(r64.ok);
  }

  std::vector<Tensor> inputs_f32;
  for (const Tensor& t : inputs_f64) inputs_f32.push_back(is_floating(t.dtype()) ? t.to(DType::f32) : t);
  {
    const GradcheckResult r32 = gradcheck(f, inputs_f32, float_gradcheck_options(skip));
    INFO("f32: " << r32.report << " (max abs err " << r32.max_abs_error << ")");
    CHECK(r32.ok);
  }
}

// Restores the default thread count when a test ends, however it ends.
struct ThreadCountGuard {
  ~ThreadCountGuard() { set_num_threads(0); }
};

}  // namespace shamn::test
