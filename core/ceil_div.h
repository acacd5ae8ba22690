#pragma once
// How many pieces of size b cover a: the tiling arithmetic every kernel shares.
#include <cstdint>

namespace shamn {

// ceil(a / b) for a >= 0 and b > 0.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace shamn
