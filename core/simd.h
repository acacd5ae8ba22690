#pragma once
// The one SIMD vocabulary of the kernels, compiled for the level of the source
// that includes it (core/isa.h; the baseline's portable code elsewhere):
//
//   Vec    the widest float register the level has (16 lanes AVX-512, 8 AVX2,
//          8 plain floats portable) for register-tiled micro-kernels, whose every
//          output is one FMA chain: the same bits at any width.
//   F      sixteen float lanes as one value (GCC vector extension: one zmm, two
//          ymm, or what the baseline has) with fmadd, sum, sum16, dot, exp and
//          exp2.
//
// Every operation gives bitwise the same result at every level, in a build
// whose baseline has FMA (the default, x86-64-v3): the portable sums add in the
// tree order of the AVX-512 instructions, the portable exp rounds and scales as
// vrndscaleps / vscalefps do, every fused multiply-add is explicit, and the
// compiler contracts the remaining a * b + c the same way at every level. A
// build for plain x86-64 has no FMA instruction: its portable code (and all
// other code) rounds those products twice, so its last bits differ.
// tests/core/test_kernel_levels.cpp checks every kernel family.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/bf16.h"
#include "core/intrinsics.h"
#include "core/isa.h"

SHAMN_ISA_PUSH
namespace shamn::simd {
inline namespace SHAMN_ISA_NS {

// ---------------------------------------------------------------------------------
// Vec: one register of the level.

#if SHAMN_ISA_SIMD == 2
using Vec = __m512;
inline constexpr int kVec = 16;
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vload(const float* p) { return _mm512_load_ps(p); }  // 64-byte aligned
inline Vec vloadu(const float* p) { return _mm512_loadu_ps(p); }
inline void vstoreu(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vbroadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec vsplat(float s) { return _mm512_set1_ps(s); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
// round_to_bf16 (core/bf16.h) of every lane, NaNs included: the same bits.
inline Vec vround_bf16(Vec v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), high);
  const __m512i quiet_nan = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), high);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quiet_nan));
}
// A register of bf16 pairs (core/bf16.h: bf16_pair) -> the floats of the high
// and of the low halves.
inline Vec vpair_high(Vec pairs) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(pairs), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline Vec vpair_low(Vec pairs) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(pairs), 16));
}
inline Vec vpair(Vec high, Vec low) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(vpair_high(high)),
                                             _mm512_srli_epi32(_mm512_castps_si512(low), 16)));
}
#elif SHAMN_ISA_SIMD == 1
using Vec = __m256;
inline constexpr int kVec = 8;
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_load_ps(p); }  // 32-byte aligned
inline Vec vloadu(const float* p) { return _mm256_loadu_ps(p); }
inline void vstoreu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vbroadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec vsplat(float s) { return _mm256_set1_ps(s); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
// round_to_bf16 (core/bf16.h) of every lane, NaNs included: the same bits.
inline Vec vround_bf16(Vec v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), high);
  const __m256i quiet_nan = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), high);
  // Both sides are below 2^31 after the mask: the signed compare is the unsigned one.
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quiet_nan, nan));
}
inline Vec vpair_high(Vec pairs) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_castps_si256(pairs), _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline Vec vpair_low(Vec pairs) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(pairs), 16));
}
inline Vec vpair(Vec high, Vec low) {
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(vpair_high(high)),
                                             _mm256_srli_epi32(_mm256_castps_si256(low), 16)));
}
#else
// Eight plain floats the compiler may vectorise itself; vfma rounds once (std::fma,
// one instruction where the baseline has FMA).
struct Vec {
  float f[8];
};
inline constexpr int kVec = 8;
inline Vec vzero() { return Vec{}; }
inline Vec vloadu(const float* p) {
  Vec v;
  std::memcpy(v.f, p, sizeof(v.f));
  return v;
}
inline Vec vload(const float* p) { return vloadu(p); }
inline void vstoreu(float* p, Vec v) { std::memcpy(p, v.f, sizeof(v.f)); }
inline Vec vsplat(float s) {
  Vec v;
  for (float& x : v.f) x = s;
  return v;
}
inline Vec vbroadcast(const float* p) { return vsplat(*p); }
inline Vec vfma(Vec a, Vec b, Vec c) {
  for (int l = 0; l < kVec; ++l) c.f[l] = std::fma(a.f[l], b.f[l], c.f[l]);
  return c;
}
inline Vec vadd(Vec a, Vec b) {
  for (int l = 0; l < kVec; ++l) a.f[l] += b.f[l];
  return a;
}
inline Vec vmul(Vec a, Vec b) {
  for (int l = 0; l < kVec; ++l) a.f[l] *= b.f[l];
  return a;
}
inline Vec vround_bf16(Vec v) {
  for (float& x : v.f) x = round_to_bf16(x);
  return v;
}
inline Vec vpair_high(Vec pairs) {
  for (float& x : pairs.f) x = bf16_pair_high(x);
  return pairs;
}
inline Vec vpair_low(Vec pairs) {
  for (float& x : pairs.f) x = bf16_pair_low(x);
  return pairs;
}
inline Vec vpair(Vec high, Vec low) {
  for (int l = 0; l < kVec; ++l) high.f[l] = bf16_pair(high.f[l], low.f[l]);
  return high;
}
#endif

// ---------------------------------------------------------------------------------
// F: sixteen lanes, for kernels that run the same arithmetic over 16 rows (or 16
// features) at once.

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

// a * b + c, rounded once: explicit at every level, because the compiler may keep
// a * b + c apart where it accumulates in a loop (the build's avoid-fma-max-bits).
inline F fmadd(F a, F b, F c) {
#if SHAMN_ISA_SIMD == 2
  return _mm512_fmadd_ps(a, b, c);
#elif SHAMN_ISA_SIMD == 1 || (SHAMN_ISA_LEVEL < 0 && defined(__AVX2__) && defined(__FMA__))
  // (Also the baseline's own sources when it has AVX2 and FMA, as x86-64-v3 does:
  // std::fma lane by lane compiles to sixteen scalar instructions.)
  __m256 ah, al, bh, bl, ch, cl;
  std::memcpy(&al, &a, 32), std::memcpy(&ah, reinterpret_cast<const char*>(&a) + 32, 32);
  std::memcpy(&bl, &b, 32), std::memcpy(&bh, reinterpret_cast<const char*>(&b) + 32, 32);
  std::memcpy(&cl, &c, 32), std::memcpy(&ch, reinterpret_cast<const char*>(&c) + 32, 32);
  const __m256 rl = _mm256_fmadd_ps(al, bl, cl), rh = _mm256_fmadd_ps(ah, bh, ch);
  F r;
  std::memcpy(&r, &rl, 32), std::memcpy(reinterpret_cast<char*>(&r) + 32, &rh, 32);
  return r;
#else
  for (int i = 0; i < 16; ++i) c[i] = std::fma(a[i], b[i], c[i]);
  return c;
#endif
}

// Eight lanes, half an F: the widest vector an x86-64-v3 baseline compares in one
// instruction. GCC lowers a compare of 64-byte vectors element by element (a
// scalar compare and branch per lane) wherever the registers are narrower, so
// below the AVX-512 level every compare goes through these halves.
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

// a > b ? x : y lane by lane, for x and y of type F or I. NaN compares false.
template <class T>
inline T select_gt(F a, F b, T x, T y) {
  static_assert(sizeof(T) == sizeof(F));
#if SHAMN_ISA_SIMD == 2
  return a > b ? x : y;
#else
  T r;
  for (int h = 0; h < 2; ++h) {
    F8 ah, bh;
    I8 xh, yh;
    std::memcpy(&ah, reinterpret_cast<const char*>(&a) + 32 * h, 32);
    std::memcpy(&bh, reinterpret_cast<const char*>(&b) + 32 * h, 32);
    std::memcpy(&xh, reinterpret_cast<const char*>(&x) + 32 * h, 32);
    std::memcpy(&yh, reinterpret_cast<const char*>(&y) + 32 * h, 32);
    const I8 m = ah > bh;
    const I8 rh = (xh & m) | (yh & ~m);
    std::memcpy(reinterpret_cast<char*>(&r) + 32 * h, &rh, 32);
  }
  return r;
#endif
}

inline F max(F a, F b) { return select_gt(a, b, a, b); }

// The sum of the 16 lanes as vextractf64x4 / vextractf128 / shuffle halve them:
// lanes i + 8, then i + 4, then i + 2, then the last two.
inline float sum(F v) {
#if SHAMN_ISA_SIMD == 2
  return _mm512_reduce_add_ps(v);
#else
  float t[8], u[4];
  for (int i = 0; i < 8; ++i) t[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) u[i] = t[i + 4] + t[i];
  return (u[0] + u[2]) + (u[1] + u[3]);
#endif
}

// Sixteen horizontal sums at once: lane i of the result is the sum of v[i]'s lanes
// (in the order of the transpose-and-add tree below, not that of sum()).
inline F sum16(const F v[kLanes]) {
#if SHAMN_ISA_SIMD == 2
  // About 3 instructions per sum instead of 8 for sum() one at a time.
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
  // The same tree: each 4-lane quarter q sums (e0 + e2) + (e1 + e3), then the
  // quarters (q0 + q2) + (q1 + q3).
  F r;
  for (int i = 0; i < kLanes; ++i) {
    const F& e = v[i];
    float part[4];
    for (int q = 0; q < 4; ++q) part[q] = (e[4 * q] + e[4 * q + 2]) + (e[4 * q + 1] + e[4 * q + 3]);
    r[i] = (part[0] + part[2]) + (part[1] + part[3]);
  }
  return r;
#endif
}

// sum_i a[i] * b[i] in a fixed order (four 16-lane partial sums, then the tail):
// the compiler will not vectorise a float reduction on its own without -ffast-math.
inline float dot(const float* a, const float* b, int64_t n) {
#if SHAMN_ISA_SIMD == 2
  F acc[4] = {F{}, F{}, F{}, F{}};
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes)
    for (int k = 0; k < 4; ++k) acc[k] = fmadd(load(a + i + k * kLanes), load(b + i + k * kLanes), acc[k]);
  for (; i + kLanes <= n; i += kLanes) acc[0] = fmadd(load(a + i), load(b + i), acc[0]);
  float s = sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
#else
  // The same sums with each F as two halves of eight lanes held in registers (a
  // 64-byte F lives on the stack where registers are narrower): lo[k] and hi[k]
  // are acc[k]'s lanes 0-7 and 8-15, and the end adds as sum() does.
  F8 lo[4] = {F8{}, F8{}, F8{}, F8{}}, hi[4] = {F8{}, F8{}, F8{}, F8{}};
  auto load8 = [](const float* p) {
    F8 v;
    std::memcpy(&v, p, sizeof(F8));
    return v;
  };
  auto fma8 = [](F8 x, F8 y, F8 z) {
#if SHAMN_ISA_SIMD == 1 || (SHAMN_ISA_LEVEL < 0 && defined(__AVX2__) && defined(__FMA__))
    return F8(_mm256_fmadd_ps(x, y, z));
#else
    for (int l = 0; l < 8; ++l) z[l] = std::fma(x[l], y[l], z[l]);
    return z;
#endif
  };
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes)
    for (int k = 0; k < 4; ++k) {
      lo[k] = fma8(load8(a + i + k * kLanes), load8(b + i + k * kLanes), lo[k]);
      hi[k] = fma8(load8(a + i + k * kLanes + 8), load8(b + i + k * kLanes + 8), hi[k]);
    }
  for (; i + kLanes <= n; i += kLanes) {
    lo[0] = fma8(load8(a + i), load8(b + i), lo[0]);
    hi[0] = fma8(load8(a + i + 8), load8(b + i + 8), hi[0]);
  }
  const F8 t = ((hi[0] + hi[1]) + (hi[2] + hi[3])) + ((lo[0] + lo[1]) + (lo[2] + lo[3]));
  float u[4];
  for (int l = 0; l < 4; ++l) u[l] = t[l + 4] + t[l];
  float s = (u[0] + u[2]) + (u[1] + u[3]);
#endif
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

// p * 2^n rounded once, for integral n in [-250, 250] or NaN lanes of p (as
// vscalefps): exp and exp2's last step.
inline F scale_pow2(F p, F n) {
#if SHAMN_ISA_SIMD == 2
  return _mm512_scalef_ps(p, n);
#else
  // In two exact halves 2^h and 2^(n-h) (each a normal float), so only the
  // second product can round (to a denormal, or to inf). NaN lanes keep p's
  // NaN (their n is replaced by -250 to convert it).
  I h, rest;
  for (int i = 0; i < kLanes; ++i) {
    const float c = n[i] >= -250.0f && n[i] <= 250.0f ? n[i] : (n[i] > 0.0f ? 250.0f : -250.0f);
    const int32_t k = static_cast<int32_t>(c);
    h[i] = k >> 1;
    rest[i] = k - (k >> 1);
  }
  const F scale_h = std::bit_cast<F>((h + 127) << 23);
  const F scale_rest = std::bit_cast<F>((rest + 127) << 23);
  return (p * scale_h) * scale_rest;
#endif
}

// x clamped to [lo, hi], NaN lanes kept.
inline F clamp_keep_nan(F x, float lo, float hi) {
#if SHAMN_ISA_SIMD == 2
  // maxps and minps return their second operand when one is NaN.
  return _mm512_min_ps(splat(hi), _mm512_max_ps(splat(lo), x));
#else
  const F l = splat(lo), h = splat(hi);
  const F xc = select_gt(l, x, l, x);  // NaN compares false and stays
  return select_gt(xc, h, h, xc);
#endif
}

// x rounded to the nearest integer, ties to even (vrndscaleps).
inline F round_even(F x) {
#if SHAMN_ISA_SIMD == 2
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  F n;
  for (int i = 0; i < kLanes; ++i) n[i] = std::nearbyint(x[i]);
  return n;
#endif
}

// exp(x) lane by lane to within 2 ulp: x = n ln2 + r (Cody-Waite: ln 2 split in two
// so that n * hi is exact), exp(x) = 2^n exp(r), rounded once. NaN gives NaN, lanes
// above ln(FLT_MAX) give inf, lanes below -104 give 0, with denormals between.
// std::exp does not vectorise without -ffast-math, and the softmax-heavy kernels
// spend much of their time here. The upper clamp keeps +inf out of vscalefps,
// whose answer for a NaN scaled by +inf is not the same on every CPU (Zen 4
// gives +inf).
inline F exp(F x) {
  const F log2e = splat(1.44269504088896341f);
  const F ln2_hi = splat(-0.693359375f), ln2_lo = splat(2.12194440e-4f);
  const F xc = clamp_keep_nan(x, -104.0f, 100.0f);
  const F n = round_even(xc * log2e);
  return scale_pow2(exp_reduced(fmadd(n, ln2_lo, fmadd(n, ln2_hi, xc))), n);
}

// 2^y lane by lane to within 2 ulp, for kernels whose arguments come in base 2
// (the hashed head's logits, scaled by log2(e) through its importance): y = n
// + f with |f| <= 1/2 exact, 2^f by a degree-6 polynomial (a least-squares
// fit in relative error, 1.0e-7 at most in float), times 2^n rounded once.
// Four fewer multiply-adds than exp, which is most of a softmax's arithmetic.
// NaN gives NaN, lanes at 128 and above give inf, lanes below -150 give 0.
inline F exp2(F y) {
  const F yc = clamp_keep_nan(y, -150.0f, 150.0f);
  const F n = round_even(yc);
  const F f = yc - n;
  F p = splat(1.5370704932138324e-4f);
  p = fmadd(p, f, splat(1.3399848248809576e-3f));
  p = fmadd(p, f, splat(9.618373587727547e-3f));
  p = fmadd(p, f, splat(5.550329014658928e-2f));
  p = fmadd(p, f, splat(2.4022647738456726e-1f));
  p = fmadd(p, f, splat(6.931471824645996e-1f));
  return scale_pow2(fmadd(p, f, splat(1.0f)), n);
}

#if SHAMN_ISA_SIMD == 2
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

}  // namespace SHAMN_ISA_NS
}  // namespace shamn::simd
SHAMN_ISA_POP
