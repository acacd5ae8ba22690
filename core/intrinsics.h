#pragma once
// <immintrin.h> for every SIMD source. GCC 12 warns falsely about
// _mm512_undefined_ps() inside its own intrinsics (GCC bug 105593) wherever
// they are inlined; the warning is attributed to the header, so it is
// silenced there and nowhere else.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
