#include "infer/quant_dot.h"

#include "core/parallel.h"
#include "infer/quant_dot_paths.h"
#include "infer/quant_kernels.h"

namespace shamn {
namespace {

using quant_detail::add_blocks_scalar;
using quant_detail::kLanes;
using quant_detail::sum_lanes;

template <class W>
float dot_scalar(const W* w, const BlockQ8* x, int64_t blocks) {
  float lanes[kLanes] = {};
  add_blocks_scalar(w, x, 0, blocks, lanes);
  return sum_lanes(lanes);
}

// Rows per task: a 512-block row is ~18 KB of Q8 weights, so 16 rows amortise
// the task overhead while a 512-row matrix still splits across cores.
constexpr int64_t kRowGrain = 16;

}  // namespace

float dot_q8_q8(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return quant_kernels().q8.dot(a, b, blocks);
}

float dot_q4_q8(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return quant_kernels().q4.dot(w, x, blocks);
}

void dot_rows_q8(const BlockQ8* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y) {
  quant_kernels().q8.dot_rows(W, rows, blocks_per_row, x, y);
}

void dot_rows_q4(const BlockQ4* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y) {
  quant_kernels().q4.dot_rows(W, rows, blocks_per_row, x, y);
}

void matvec_q8(const BlockQ8* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y) {
  parallel_for(0, rows, kRowGrain, [&](int64_t lo, int64_t hi) {
    dot_rows_q8(W + lo * blocks_per_row, hi - lo, blocks_per_row, x, y + lo);
  });
}

void matvec_q4(const BlockQ4* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y) {
  parallel_for(0, rows, kRowGrain, [&](int64_t lo, int64_t hi) {
    dot_rows_q4(W + lo * blocks_per_row, hi - lo, blocks_per_row, x, y + lo);
  });
}

}  // namespace shamn

namespace shamn::quant_detail {

float dot_q8_q8_scalar(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return dot_scalar(a, b, blocks);
}
float dot_q4_q8_scalar(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return dot_scalar(w, x, blocks);
}

void dot_rows_q8_q8_scalar(const BlockQ8* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                           float* y) {
  for (int64_t r = 0; r < rows; ++r) y[r] = dot_scalar(w + r * blocks_per_row, x, blocks_per_row);
}

void dot_rows_q4_q8_scalar(const BlockQ4* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                           float* y) {
  for (int64_t r = 0; r < rows; ++r) y[r] = dot_scalar(w + r * blocks_per_row, x, blocks_per_row);
}

}  // namespace shamn::quant_detail
