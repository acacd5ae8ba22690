#pragma once
// Compiling one kernel family once per SIMD level.
//
// A family's kernels live in a source that the build compiles three times
// (cmake/shamn_library.cmake, ISA_SOURCES), with SHAMN_ISA_LEVEL = 0 (scalar),
// 1 (avx2) or 2 (avx512). The source includes what it needs, then wraps its
// kernels in SHAMN_ISA_BEGIN / SHAMN_ISA_END: inside, every function is compiled
// for that level (GCC's target pragma) and named in a namespace of its own
// (shamn::isa_scalar, shamn::isa_avx2, shamn::isa_avx512). Each copy ends with
// its table of entry points, SHAMN_ISA_TABLE(Family) = {...}; the family's
// dispatcher picks the table of the level in use (core/kernel_level.h).
//
// Why a pragma around the kernels rather than -mavx512f on the whole file: with
// the flag, every inline function and template the file instantiates (std::vector,
// oneTBB's task machinery, our check helpers) would be compiled for AVX-512 too,
// and the linker keeps one copy of each, maybe that one, which then faults on an
// AVX2-only CPU. The pragma gives the target only to functions defined inside
// the region; code from headers keeps the baseline, and can still be inlined
// into the kernels.
//
// Only GCC builds the SIMD copies: another compiler (Clang, for the fuzz build)
// compiles the scalar one three times, and every level then runs it.
// A source outside ISA_SOURCES that includes core/simd.h gets its portable code
// at the baseline, in a namespace of its own (isa_baseline).
#if !defined(SHAMN_ISA_LEVEL)
#define SHAMN_ISA_LEVEL (-1)
#endif

// The SIMD level the code below compiles for: 0 portable, 1 AVX2, 2 AVX-512.
#if defined(__clang__) || !defined(__GNUC__) || SHAMN_ISA_LEVEL < 0
#define SHAMN_ISA_SIMD 0
#else
#define SHAMN_ISA_SIMD SHAMN_ISA_LEVEL
#endif

#if SHAMN_ISA_LEVEL == 2
#define SHAMN_ISA_NS isa_avx512
#define SHAMN_ISA_TABLE_NAME kernels_avx512
#elif SHAMN_ISA_LEVEL == 1
#define SHAMN_ISA_NS isa_avx2
#define SHAMN_ISA_TABLE_NAME kernels_avx2
#elif SHAMN_ISA_LEVEL == 0
#define SHAMN_ISA_NS isa_scalar
#define SHAMN_ISA_TABLE_NAME kernels_scalar
#else
#define SHAMN_ISA_NS isa_baseline
#endif

#if SHAMN_ISA_SIMD == 2
#define SHAMN_ISA_PRAGMA_TARGET _Pragma("GCC target(\"avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni\")")
#elif SHAMN_ISA_SIMD == 1
#define SHAMN_ISA_PRAGMA_TARGET _Pragma("GCC target(\"avx2,fma\")")
#else
#define SHAMN_ISA_PRAGMA_TARGET
#endif

// The target pragma alone, for headers that open their own namespaces (core/simd.h).
#if defined(__GNUC__) && !defined(__clang__)
#define SHAMN_ISA_PUSH _Pragma("GCC push_options") SHAMN_ISA_PRAGMA_TARGET
#define SHAMN_ISA_POP _Pragma("GCC pop_options")
#else
#define SHAMN_ISA_PUSH
#define SHAMN_ISA_POP
#endif

#define SHAMN_ISA_BEGIN SHAMN_ISA_PUSH namespace shamn::SHAMN_ISA_NS {
#define SHAMN_ISA_END \
  }                   \
  SHAMN_ISA_POP

// The level's table of a family: `SHAMN_ISA_TABLE(bsr::Kernels) = {...};` defines
// bsr::kernels_avx2 (say), declared in the family's header as
//   extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;
#define SHAMN_ISA_TABLE(Table) const Table SHAMN_ISA_TABLE_NAME
