#pragma once
// Sixteen float lanes as one value, for kernels that run the same arithmetic over
// 16 rows (or 16 features) at once. Written with GCC/Clang vector extensions, so the
// same source becomes one AVX-512 register here, two AVX2 registers or four SSE
// registers elsewhere; the few operations the extensions lack (fused multiply-add,
// horizontal sum) use AVX-512 intrinsics when they exist and plain lane loops
// otherwise.
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
// GCC 12 warns falsely about _mm512_undefined_ps() inside its own intrinsics (GCC bug
// 105593); the warning is attributed to the header, so silence it there.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace shamn::vec16 {

inline constexpr int kLanes = 16;
typedef float F __attribute__((vector_size(64)));
typedef int32_t I __attribute__((vector_size(64)));

inline F splat(float s) { return F{} + s; }
inline F load(const float* p) {
  F v;
  std::memcpy(&v, p, sizeof(F));
  return v;
}
inline void store(float* p, F v) { std::memcpy(p, &v, sizeof(F)); }

// a * b + c, rounded once where the hardware can.
inline F fmadd(F a, F b, F c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

inline F max(F a, F b) { return a > b ? a : b; }

inline float sum(F v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(v);
#else
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
#endif
}

// Sixteen horizontal sums at once: lane i of the result is sum(v[i]). A transpose-
// and-add tree, about 3 instructions per sum instead of 8 for sum() one at a time.
inline F sum16(const F v[kLanes]) {
#if defined(__AVX512F__)
  __m512 w[8], q[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    w[i] =
        _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: the lane's partial sums of 4 inputs
    q[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xEE));
  const __m512 f01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(q[0], q[1], 0x44), _mm512_shuffle_f32x4(q[0], q[1], 0xEE));
  const __m512 f23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(q[2], q[3], 0x44), _mm512_shuffle_f32x4(q[2], q[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(f01, f23, 0x88), _mm512_shuffle_f32x4(f01, f23, 0xDD));
#else
  F r;
  for (int i = 0; i < kLanes; ++i) r[i] = sum(v[i]);
  return r;
#endif
}

// sum_i a[i] * b[i] in a fixed order (four 16-lane partial sums, then the tail):
// the compiler will not vectorise a float reduction on its own without -ffast-math.
inline float dot(const float* a, const float* b, int64_t n) {
  F acc[4] = {F{}, F{}, F{}, F{}};
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes)
    for (int k = 0; k < 4; ++k) acc[k] = fmadd(load(a + i + k * kLanes), load(b + i + k * kLanes), acc[k]);
  for (; i + kLanes <= n; i += kLanes) acc[0] = fmadd(load(a + i), load(b + i), acc[0]);
  float s = sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// exp(r) for |r| <= ln(2)/2: the degree-5 polynomial of Cephes' expf.
inline F exp_reduced(F r) {
  F p = splat(1.9875691500e-4f);
  p = fmadd(p, r, splat(1.3981999507e-3f));
  p = fmadd(p, r, splat(8.3334519073e-3f));
  p = fmadd(p, r, splat(4.1665795894e-2f));
  p = fmadd(p, r, splat(1.6666665459e-1f));
  p = fmadd(p, r, splat(5.0000001201e-1f));
  return fmadd(p, r * r, r) + splat(1.0f);
}

// exp(x) lane by lane to within 2 ulp: x = n ln2 + r (Cody-Waite: ln 2 split in two
// so that n * hi is exact), exp(x) = 2^n exp(r). NaN propagates, lanes above 88.7
// give inf (the portable path gives exp(88) just below that), lanes below -87 give 0
// (AVX-512 returns the denormals down to -104). std::exp does not vectorise without
// -ffast-math, and the softmax-heavy kernels spend much of their time here.
inline F exp(F x) {
  const F log2e = splat(1.44269504088896341f);
  const F ln2_hi = splat(-0.693359375f), ln2_lo = splat(2.12194440e-4f);
#if defined(__AVX512F__)
  // vrndscaleps rounds and vscalefps multiplies by 2^n with IEEE overflow and
  // underflow: fewer instructions than the bit tricks below. maxps returns its
  // second operand when one is NaN, so NaN survives the clamp.
  const F xc = _mm512_max_ps(splat(-104.0f), x);
  const F n = _mm512_roundscale_ps(xc * log2e, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const F r = fmadd(n, ln2_lo, fmadd(n, ln2_hi, xc));
  return _mm512_scalef_ps(exp_reduced(r), n);
#else
  const F lo = splat(-87.0f), hi = splat(88.0f);
  const F magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  F xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const F t = fmadd(xc, log2e, magic);
  const F n = t - magic;
  F y = exp_reduced(fmadd(n, ln2_lo, fmadd(n, ln2_hi, xc)));
  // Scale by 2^n by adding n to the exponent field (n sits in t's low mantissa bits).
  const I shift = (std::bit_cast<I>(t) - std::bit_cast<I>(magic)) << 23;
  y = std::bit_cast<F>(std::bit_cast<I>(y) + shift);
  y = x > splat(88.7228f) ? splat(__builtin_inff()) : y;
  return x < lo ? F{} : y;
#endif
}

#if defined(__AVX512F__)
// Transposes 16 rows of 16 floats in registers: afterwards r[k] holds column k.
inline void transpose_16x16(__m512 r[16]) {
  __m512 t[16];
  // Interleave row pairs: lane L of t[2p] = rows 2p, 2p+1 at columns 4L, 4L+1.
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  // Interleave pairs of pairs: lane L of u[4g + j] = column 4L + j of rows 4g..4g+3.
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  // Column 4L + j gathers lane L of u[j], u[4 + j], u[8 + j], u[12 + j].
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}
#endif

}  // namespace shamn::vec16
