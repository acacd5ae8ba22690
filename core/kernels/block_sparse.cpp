#include "core/kernels/block_sparse.h"

#include <atomic>

#include "core/check.h"
#include "core/kernel_level.h"
#include "core/kernels/block_sparse_isa.h"
#include "core/kernels/elementwise.h"

// The float products run the kernels of the level in use (block_sparse_isa.cpp).

namespace shamn {
namespace {

const bsr::Kernels* const kLevels[] = {&bsr::kernels_scalar, &bsr::kernels_avx2, &bsr::kernels_avx512};

std::atomic<int64_t> g_pack_readers{kGradValuesPackReaders};
std::atomic<bool> g_rows_in_place{true};

}  // namespace

void set_grad_values_pack_readers(int64_t readers) {
  SHAMN_CHECK(readers >= 0, "set_grad_values_pack_readers: ", readers, " readers");
  g_pack_readers = readers == 0 ? kGradValuesPackReaders : readers;
}

int64_t bsr::grad_values_pack_readers() { return g_pack_readers.load(std::memory_order_relaxed); }

void set_block_sparse_rows_in_place(bool in_place) { g_rows_in_place = in_place; }

bool bsr::rows_in_place() { return g_rows_in_place.load(std::memory_order_relaxed); }

void check_block_pattern(const int32_t* col_index, const BlockSparseDims& d) {
  SHAMN_CHECK(d.block > 0 && d.in % d.block == 0 && d.out % d.block == 0, "block-sparse dims ", d.out, "x",
              d.in, " are not multiples of the block ", d.block);
  SHAMN_CHECK(d.active >= 1 && d.active <= d.col_blocks(), "block-sparse: ", d.active,
              " active blocks per row, but only ", d.col_blocks(), " column blocks");
  for (int64_t r = 0; r < d.row_blocks(); ++r)
    for (int64_t m = 0; m < d.active; ++m) {
      const int32_t c = col_index[r * d.active + m];
      SHAMN_CHECK(c >= 0 && c < d.col_blocks(), "col_index[", r, ", ", m, "] = ", c, " is outside [0, ",
                  d.col_blocks(), ")");
      SHAMN_CHECK(m == 0 || c > col_index[r * d.active + m - 1], "col_index row ", r,
                  " is not sorted ascending with distinct entries");
    }
}

void block_sparse_forward(float* y, const float* x, const float* values, const int32_t* col_index,
                          const float* bias, int64_t n, const BlockSparseDims& dims, ProductPrecision p,
                          const RowSource& src, const float* residual) {
  for_kernel_level(kLevels).forward(y, x, values, col_index, bias, n, dims, p, src, residual);
}

void block_sparse_backward_input(float* dx, const float* dy, const float* values, const int32_t* col_index,
                                 int64_t n, const BlockSparseDims& dims, ProductPrecision p, bool overwrite) {
  for_kernel_level(kLevels).backward_input(dx, dy, values, col_index, n, dims, p, overwrite);
}

void block_sparse_backward_values(float* dvalues, const float* dy, const float* x, const int32_t* col_index,
                                  int64_t n, const BlockSparseDims& dims, ProductPrecision p,
                                  const RowSource& src, bool overwrite) {
  for_kernel_level(kLevels).backward_values(dvalues, dy, x, col_index, n, dims, p, src, overwrite);
}

void block_sparse_backward_bias(float* dbias, const float* dy, int64_t n, const BlockSparseDims& dims) {
  sum_rows_accumulate<float>(dbias, dy, nullptr, n, dims.out);
}

}  // namespace shamn
