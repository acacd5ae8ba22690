#pragma once
// Philox4x32-10 (core/rng.h) for 16 consecutive blocks at once, at the kernel
// level in use: where one block is a chain of 10 dependent rounds, 16 blocks
// side by side fill a vector register's lanes. Dropout's masks draw from it.
#include <cstdint>

namespace shamn {

inline constexpr int kPhiloxSpanBlocks = 16;
inline constexpr int kPhiloxSpanWords = 4 * kPhiloxSpanBlocks;

// words[16 j + l] = word j of philox4x32(first + l, stream, seed), l < 16, j < 4:
// the same bits at every kernel level.
void philox_span(uint64_t first, uint64_t stream, uint64_t seed, uint32_t* words);

}  // namespace shamn
