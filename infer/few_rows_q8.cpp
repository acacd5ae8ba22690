#include "infer/few_rows_q8.h"

#include <algorithm>

#include "core/check.h"
#include "infer/quant_kernels.h"

namespace shamn {

FewRowsQ8 pack_few_rows_q8(const TileQ8* tiles, int64_t rows, int64_t blocks) {
  constexpr int64_t kR = FewRowsQ8::kMaxRows, kGroups = kQuantBlock / 4;
  SHAMN_CHECK(0 < rows && rows <= kR && blocks > 0, "few-rows matrix of ", rows, " rows and ", blocks,
              " blocks");
  FewRowsQ8 p;
  p.rows = rows;
  p.blocks = blocks;
  p.packed = Buffer<int8_t>(blocks * kGroups * 2 * kR * 4);
  p.d = Buffer<float>(blocks * 2 * kR);
  p.offset = Buffer<int32_t>(blocks * 2 * kR);
  std::fill_n(p.packed.data(), p.packed.size(), int8_t{0});
  for (int64_t j = 0; j < blocks; ++j) {
    const TileQ8& tile = tiles[j];
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t r = 0; r < kR; ++r) {
        int32_t sum = 0;
        for (int64_t g = 0; g < kGroups && r < rows; ++g)
          for (int64_t i = 0; i < 4; ++i) {
            p.packed[(((j * kGroups + g) * 2 + h) * kR + r) * 4 + i] = tile.q[g][r][i];
            sum += tile.q[g][r][i];
          }
        p.d[(j * 2 + h) * kR + r] = r < rows ? tile.d[r] : 0.0f;
        p.offset[(j * 2 + h) * kR + r] = -128 * sum;
      }
    }
  }
  return p;
}

bool few_rows_q8_available() { return quant_kernels().few_rows_batch != nullptr; }

void few_rows_q8_batch(const FewRowsQ8& w, const Q8Rows& x, float* t, int64_t t_stride) {
  SHAMN_CHECK(few_rows_q8_available() && x.index == nullptr,
              "few-rows product: needs AVX-512 VNNI and whole rows of x");
  quant_kernels().few_rows_batch(w, x, t, t_stride);
}

}  // namespace shamn
