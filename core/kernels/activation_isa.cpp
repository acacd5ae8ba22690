// The float activations, compiled once per SIMD level (core/isa.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/kernels/activation_isa.h"
#include "core/kernels/activation_simd.h"
#include "core/parallel.h"
#include "core/simd.h"

SHAMN_ISA_BEGIN
namespace {

using simd::F;
using simd::splat;

using act16::Gelu;
using act16::Silu;

inline F load_n(const float* p, int64_t count) {
  if (count == 16) return simd::load(p);
  float buf[16] = {};
  std::memcpy(buf, p, sizeof(float) * static_cast<size_t>(count));
  return simd::load(buf);
}

inline void store_n(float* p, F v, int64_t count) {
  if (count == 16) return simd::store(p, v);
  float buf[16];
  simd::store(buf, v);
  std::memcpy(p, buf, sizeof(float) * static_cast<size_t>(count));
}

// out[i .. i+16) = value(load, i) for every 16-element block i of [0, n), in
// parallel over blocks; value reads its operands as load(p + i). Four full
// blocks per iteration: each lane's value is a long dependent chain (the exp's
// polynomial, a division), so groups give the core independent work, and value
// is copied into the task so that its pointers stay in registers across the
// stores (1.2x over a block at a time, the same bits). The last, partial block
// is loaded zero-padded. out may be an operand: a group's loads come before
// its stores.
template <class Value>
void map16(float* out, int64_t n, const Value& value) {
  const int64_t full = n / 16;
  parallel_for(0, (n + 15) / 16, 1024, [out, n, full, value](int64_t lo, int64_t hi) {
    const Value f = value;
    const auto load = [](const float* p) { return simd::load(p); };
    const int64_t end = std::min(hi, full);
    int64_t b = lo;
    for (; b + 4 <= end; b += 4) {
      F v[4];
      for (int k = 0; k < 4; ++k) v[k] = f(load, (b + k) * 16);
      for (int k = 0; k < 4; ++k) simd::store(out + (b + k) * 16, v[k]);
    }
    for (; b < hi; ++b) {
      const int64_t i = b * 16, c = std::min<int64_t>(16, n - i);
      store_n(out + i, f([c](const float* p) { return load_n(p, c); }, i), c);
    }
  });
}

template <class Fn>
void map_forward16(float* y, const float* x, int64_t n) {
  map16(y, n, [x](auto load, int64_t i) { return Fn::forward(load(x + i)); });
}

// dx += dy * f'(x), or dx = dy * f'(x) with overwrite (dx may be dy then).
template <class Fn>
void map_backward16(float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  if (overwrite) {
    map16(dx, n, [dy, x](auto load, int64_t i) { return load(dy + i) * Fn::derivative(load(x + i)); });
  } else {
    map16(dx, n, [dx, dy, x](auto load, int64_t i) {
      return load(dx + i) + load(dy + i) * Fn::derivative(load(x + i));
    });
  }
}

// y = f(x) and dx (+)= dy * f'(x) in one pass over 16-element blocks, four full
// blocks an iteration as in map16; dx may be dy.
template <class Fn>
void map_forward_backward16(float* y, float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  const int64_t full = n / 16;
  parallel_for(0, (n + 15) / 16, 1024, [=](int64_t lo, int64_t hi) {
    // The gradient as map_backward16 writes it, so that the compiler contracts it alike.
    const auto block = [=](int64_t i, int64_t c, F& yv, F& g) {
      F d;
      Fn::forward_and_derivative(load_n(x + i, c), yv, d);
      if (overwrite)
        g = load_n(dy + i, c) * d;
      else
        g = load_n(dx + i, c) + load_n(dy + i, c) * d;
    };
    const int64_t end = std::min(hi, full);
    int64_t b = lo;
    for (; b + 4 <= end; b += 4) {
      F yv[4], g[4];
      for (int k = 0; k < 4; ++k) block((b + k) * 16, 16, yv[k], g[k]);
      for (int k = 0; k < 4; ++k) {
        simd::store(y + (b + k) * 16, yv[k]);
        simd::store(dx + (b + k) * 16, g[k]);
      }
    }
    for (; b < hi; ++b) {
      const int64_t i = b * 16, c = std::min<int64_t>(16, n - i);
      F yv, g;
      block(i, c, yv, g);
      store_n(y + i, yv, c);
      store_n(dx + i, g, c);
    }
  });
}

}  // namespace

void gelu_forward(float* y, const float* x, int64_t n) { map_forward16<Gelu>(y, x, n); }
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  map_backward16<Gelu>(dx, dy, x, n, overwrite);
}
void gelu_forward_backward(float* y, float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  map_forward_backward16<Gelu>(y, dx, dy, x, n, overwrite);
}
void silu_forward(float* y, const float* x, int64_t n) { map_forward16<Silu>(y, x, n); }
void silu_backward(float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  map_backward16<Silu>(dx, dy, x, n, overwrite);
}
void silu_forward_backward(float* y, float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  map_forward_backward16<Silu>(y, dx, dy, x, n, overwrite);
}

void sigmoid_forward(float* y, const float* x, int64_t n) {
  map16(y, n, [x](auto load, int64_t i) { return act16::sigmoid(load(x + i)); });
}

void sigmoid_backward(float* dx, const float* dy, const float* y, int64_t n) {
  map16(dx, n, [dx, dy, y](auto load, int64_t i) {
    const F s = load(y + i);
    return load(dx + i) + load(dy + i) * s * (splat(1.0f) - s);
  });
}

// Two passes over 16 lanes on the calling thread (one row; callers split rows
// over threads): the maximum, then two accumulators of exp(x - max), summed in
// simd::sum's order. Padding lanes of the last block are zeroed after the exp.
double logsumexp(const float* x, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  F m = splat(neg_inf);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = simd::max(simd::load(x + i), m);
  float tail[16];
  std::fill_n(tail, 16, neg_inf);
  std::memcpy(tail, x + i, sizeof(float) * static_cast<size_t>(n - i));
  m = simd::max(simd::load(tail), m);
  float lanes[16];
  simd::store(lanes, m);
  const float mx = *std::max_element(lanes, lanes + 16);
  if (!std::isfinite(mx)) return mx;
  F acc[2] = {splat(0.0f), splat(0.0f)};
  i = 0;
  for (; i + 32 <= n; i += 32) {
    acc[0] += simd::exp(simd::load(x + i) - splat(mx));
    acc[1] += simd::exp(simd::load(x + i + 16) - splat(mx));
  }
  for (; i + 16 <= n; i += 16) acc[0] += simd::exp(simd::load(x + i) - splat(mx));
  if (i < n) {
    float keep[16] = {};
    std::fill_n(keep, n - i, 1.0f);
    std::memcpy(tail, x + i, sizeof(float) * static_cast<size_t>(n - i));
    acc[1] += simd::exp(simd::load(tail) - splat(mx)) * simd::load(keep);
  }
  return static_cast<double>(mx) + std::log(static_cast<double>(simd::sum(acc[0] + acc[1])));
}

// On the calling thread: short arrays (a chunk of router rows) inside callers'
// own parallel loops.
void exp_forward(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) simd::store(y + i, simd::exp(simd::load(x + i)));
  if (i < n) store_n(y + i, simd::exp(load_n(x + i, n - i)), n - i);
}

SHAMN_ISA_END

namespace shamn::activation_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::gelu_forward,
                            &::shamn::SHAMN_ISA_NS::gelu_backward,
                            &::shamn::SHAMN_ISA_NS::silu_forward,
                            &::shamn::SHAMN_ISA_NS::silu_backward,
                            &::shamn::SHAMN_ISA_NS::sigmoid_forward,
                            &::shamn::SHAMN_ISA_NS::sigmoid_backward,
                            &::shamn::SHAMN_ISA_NS::logsumexp,
                            &::shamn::SHAMN_ISA_NS::exp_forward,
                            &::shamn::SHAMN_ISA_NS::gelu_forward_backward,
                            &::shamn::SHAMN_ISA_NS::silu_forward_backward};
}  // namespace shamn::activation_isa
