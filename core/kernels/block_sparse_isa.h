#pragma once
// Internal to core/kernels: the fast block-sparse products of one SIMD level
// (block_sparse_isa.cpp, compiled per level; see core/isa.h). Arguments as in
// core/kernels/block_sparse.h.
#include <cstdint>

#include "core/kernels/block_sparse.h"

namespace shamn::bsr {

struct Kernels {
  void (*forward)(float* y, const float* x, const float* values, const int32_t* col_index, const float* bias,
                  int64_t n, const BlockSparseDims& dims, ProductPrecision p, const RowSource& src,
                  const float* residual);
  void (*backward_input)(float* dx, const float* dy, const float* values, const int32_t* col_index, int64_t n,
                         const BlockSparseDims& dims, ProductPrecision p, bool overwrite);
  void (*backward_values)(float* dvalues, const float* dy, const float* x, const int32_t* col_index,
                          int64_t n, const BlockSparseDims& dims, ProductPrecision p, const RowSource& src,
                          bool overwrite);
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

// The threshold set_grad_values_pack_readers gives (its default when unset).
int64_t grad_values_pack_readers();

// What set_block_sparse_rows_in_place gives (true when unset).
bool rows_in_place();

}  // namespace shamn::bsr
