#include "infer/quant_kernels.h"

#include "core/kernel_level.h"
#include "infer/quant_dot_paths.h"

namespace shamn {
namespace {

using namespace quant_detail;

const QuantKernels kScalar = {
    {dot_q8_q8_scalar, dot_rows_q8_q8_scalar, dot_tiles_q8_scalar, dot_tiles_batch_q8_scalar},
    {dot_q4_q8_scalar, dot_rows_q4_q8_scalar, dot_tiles_q4_scalar, dot_tiles_batch_q4_scalar},
    quantize_row_q8_sums_scalar,
    add_scaled_blocks_q8_scalar,
    add_scaled_tile_q8_scalar,
    q8_block_sums_scalar,
    low_rank_add_q8_scalar,
    nullptr,
};

const QuantKernels kAvx2 = {
    {dot_q8_q8_avx2, dot_rows_q8_q8_avx2, dot_tiles_q8_avx2, dot_tiles_batch_q8_avx2},
    {dot_q4_q8_avx2, dot_rows_q4_q8_avx2, dot_tiles_q4_avx2, dot_tiles_batch_q4_avx2},
    quantize_row_q8_sums_avx2,
    add_scaled_q8_avx2,
    add_scaled_tile_q8_avx2,
    q8_block_sums_avx2,
    low_rank_add_q8_avx2,
    nullptr,
};

const QuantKernels kAvx512 = {
    {dot_q8_q8_avx512, dot_rows_q8_q8_avx512, dot_tiles_q8_avx512, dot_tiles_batch_q8_avx512},
    {dot_q4_q8_avx512, dot_rows_q4_q8_avx512, dot_tiles_q4_avx512, dot_tiles_batch_q4_avx512},
    quantize_row_q8_avx512,
    add_scaled_q8_avx512,
    add_scaled_tile_q8_avx512,
    q8_block_sums_avx2,
    low_rank_add_q8_avx512,
    few_rows_q8_batch_avx512,
};

const QuantKernels* const kLevels[] = {&kScalar, &kAvx2, &kAvx512};

}  // namespace

const QuantKernels& quant_kernels() { return for_kernel_level(kLevels); }

}  // namespace shamn
