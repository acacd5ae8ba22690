// The fast float kernels, compiled once per SIMD level (core/isa.h).
#include <algorithm>
#include <optional>
#include <vector>

#include "core/bf16.h"
#include "core/ceil_div.h"
#include "core/chunk_fold.h"
#include "core/kernels/block_sparse.h"
#include "core/kernels/block_sparse_isa.h"
#include "core/kernels/block_sparse_simd.h"
#include "core/parallel.h"
#include "core/prefetch.h"
#include "core/product_precision.h"
#include "core/scratch.h"

// Fast kernels (block sizes that are multiples of 16; others take the naive loops).
//
// All three products run the one micro-kernel of block_sparse_simd.h on packed
// weights, and on packed activations where those are rounded (bf16) or activated
// as they are read; f32 token tiles of up to 16 rows are read in place
// (tile_kernel_rows):
//   forward      y tile [tokens, NR of block row r]   = sum over m of
//                x panel [tokens, block c_m]  x  values[r, m]^T
//   grad input   dx tile [tokens, NR of block col c] += sum over (r, m) with c_m = c of
//                dy panel [tokens, block r]  x  values[r, m]
//   grad values  dvalues[r, m] tile [MR, NR]        += dy chunk^T x chunk (tokens = k)
// Forward and grad input run in parallel over token tiles (and over groups of block
// rows / columns when tokens are few); grad values walks the tokens in fixed chunks,
// in parallel over active blocks within a chunk (or, with few blocks for the
// threads, over the chunks, their partial sums added in chunk order). No output
// element is ever written by two tasks, and each is one FMA chain in a fixed
// order: results are bit-identical for any thread count. Grad input finds the blocks of a column through a
// column -> (row, m) index built per call (a counting sort, rows ascending).
// Measurements: experiments/block_sparse.md.

SHAMN_ISA_BEGIN
namespace {

using bsr::kVec;
// Every scratch buffer gets one cache line of slack past its end, so a full-vector
// access at a panel's edge stays inside the allocation.
constexpr size_t kScratchSlack = 16;
using bsr::tile_kernel;

#ifndef SHAMN_BSR_TILE_FLOATS
#define SHAMN_BSR_TILE_FLOATS 32768
#endif
#ifndef SHAMN_BSR_KC
#define SHAMN_BSR_KC 256
#endif
// Floats of packed activations per token tile (128 KB: the tile, and the next one
// being prefetched, stay in L2 while every block row of the weights streams past).
constexpr int64_t kTileFloats = SHAMN_BSR_TILE_FLOATS;
// Tokens per grad-values chunk: the packed chunk of dy and x is shared by all blocks.
constexpr int64_t kTokenChunk = SHAMN_BSR_KC;

// The fast path needs the narrow tiles to divide the block.
constexpr int64_t kFastMultiple = 16;
static_assert(kFastMultiple % (bsr::kTokenNarrow.nv * kVec) == 0);
static_assert(kFastMultiple % (bsr::kGradNarrow.nv * kVec) == 0);
static_assert(kFastMultiple % bsr::kGradNarrow.mr == 0);
static_assert(kFastMultiple % bsr::kGradWide.mr == 0);

thread_local ScratchSlot tls_weights;
thread_local ScratchSlot tls_tile;
thread_local ScratchSlot tls_chunk;

// The row of x that a product's row t reads.
int64_t source_row(const RowSource& src, int64_t t) { return src.rows ? src.rows[t] : t; }

// rows[0, count) = the tile's rows row_at(0), ..., row_at(valid - 1), the last
// repeated to fill a partial panel (tile_kernel_rows reads, then drops, them).
template <class RowAt>
void row_pointers(std::vector<const float*>& rows, int64_t count, int64_t valid, const RowAt& row_at) {
  for (int64_t t = 0; t < count; ++t) rows[static_cast<size_t>(t)] = row_at(std::min(t, valid - 1));
}

// Token tiles of more rows than this pack their rows even in f32: the AVX-512
// narrow tile (28 x 16, for blocks of 16) keeps a pointer per row for two FMAs a
// broadcast, and its 28 rows of a wide dy (2,048 floats, rows 8 KiB apart) fall in
// one L1 set; in place it ran 1.3-2.3x slower (`bench_block_sparse`
// part/ against part_packed/, experiments/block_sparse.md).
constexpr int kInPlaceMaxRows = 16;

bool is_wide(int64_t block) { return block % (bsr::kTokenWide.nv * kVec) == 0; }
bool is_wide_grad(int64_t block) {
  return block % (bsr::kGradWide.nv * kVec) == 0 && block % bsr::kGradWide.mr == 0;
}

// Column blocks some block row uses, ascending (only those get packed).
std::vector<int32_t> used_column_blocks(const int32_t* col_index, const BlockSparseDims& d) {
  std::vector<char> used(static_cast<size_t>(d.col_blocks()), 0);
  for (int64_t e = 0; e < d.row_blocks() * d.active; ++e) used[static_cast<size_t>(col_index[e])] = 1;
  std::vector<int32_t> list;
  for (int64_t c = 0; c < d.col_blocks(); ++c)
    if (used[static_cast<size_t>(c)]) list.push_back(static_cast<int32_t>(c));
  return list;
}

// Token tiles of `mc` tokens (a multiple of mr). When tiles are too few to keep every
// thread busy, the `blocks` (block rows or columns) are split into groups too; each
// (tile, group) unit then packs its tile itself.
struct TokenTiling {
  int64_t mc = 0, tiles = 0, groups = 1, per_group = 0;
};

TokenTiling plan_tokens(int64_t n, int64_t width, int mr, int64_t blocks) {
  TokenTiling t;
  int64_t panels = std::max<int64_t>(1, kTileFloats / (width * mr));
  panels = std::min(panels, ceil_div(n, mr));
  t.mc = panels * mr;
  t.tiles = ceil_div(n, t.mc);
  const int threads = num_threads();
  const int64_t want = threads == 1 ? 1 : 4 * static_cast<int64_t>(threads);
  t.groups = t.tiles >= want ? 1 : std::min(blocks, ceil_div(want, t.tiles));
  t.per_group = ceil_div(blocks, t.groups);
  t.groups = ceil_div(blocks, t.per_group);
  return t;
}

// While unit u computes, prefetches the rows of the next token tile: its input (read
// by the packing; through in_rows when they are gathered) and, when one unit covers
// all blocks of a tile, its output rows and the residual's.
// Only the last group of a tile does it: the unit after it starts a new tile.
class NextTile {
 public:
  NextTile(const TokenTiling& tt, int64_t u, int64_t n, int64_t steps, const float* in, int64_t in_width,
           const float* out, int64_t out_width, const int32_t* in_rows = nullptr,
           const float* residual = nullptr) {
    const int64_t tile = u / tt.groups, g = u % tt.groups;
    if (g != tt.groups - 1 || tile + 1 >= tt.tiles) return;
    const int64_t t0 = (tile + 1) * tt.mc, t1 = std::min(n, t0 + tt.mc);
    if (in_rows) {
      gathered_ = bsr::GatheredPrefetch(in, in_width, in_rows + t0, t1 - t0, steps);
    } else {
      in_ = bsr::PrefetchStream(in + t0 * in_width, in + t1 * in_width, steps, false);
    }
    if (tt.groups == 1) out_ = bsr::PrefetchStream(out + t0 * out_width, out + t1 * out_width, steps, true);
    if (tt.groups == 1 && residual)
      residual_ = bsr::PrefetchStream(residual + t0 * out_width, residual + t1 * out_width, steps, false);
  }
  void step() {
    in_.step();
    gathered_.step();
    out_.step();
    residual_.step();
  }

 private:
  bsr::PrefetchStream in_, out_, residual_;
  bsr::GatheredPrefetch gathered_;
};

// The tile of a product: f32 (tile_kernel), or with Round the bf16 pairs
// (packed by the Pairs packers; `len` then counts pair rows), on vdpbf16ps
// where bf16_dot_native().
template <int MR, int NV, bool Round>
void product_tile(bool native, int64_t nseg, int64_t len, const float* a_base, const int32_t* seg,
                  int64_t seg_stride, int64_t a_step, const float* b, int64_t b_step, float* c, int64_t ldc,
                  const float* bias, bool accumulate, int mr) {
  if constexpr (Round) {
#if SHAMN_ISA_SIMD == 2
    if (native)
      return bsr::tile_kernel_pairs_native<MR, NV>(nseg, len, a_base, seg, seg_stride, a_step, b, b_step, c,
                                                   ldc, bias, accumulate, mr);
#endif
    (void)native;
    bsr::tile_kernel_pairs<MR, NV>(nseg, len, a_base, seg, seg_stride, a_step, b, b_step, c, ldc, bias,
                                   accumulate, mr);
  } else {
    (void)native;
    tile_kernel<MR, NV>(nseg, len, a_base, seg, seg_stride, a_step, b, b_step, c, ldc, bias, accumulate, mr);
  }
}

// Rows of k per packed row: 2 for bf16 pairs.
template <bool Round>
constexpr int64_t kPerRow = Round ? 2 : 1;

// ---------------------------------------------------------------------------------

template <int MR, int NV, bool Round>
void forward_fast(float* y, const float* x, const float* values, const int32_t* col_index, const float* bias,
                  int64_t n, const BlockSparseDims& d, const RowSource& src, const float* residual) {
  constexpr int64_t NR = NV * kVec;
  const int64_t b = d.block, a = d.active, nob = d.row_blocks(), jn = b / NR;
  const int64_t panel = a * b * NR;       // floats of one packed weight panel
  const int64_t bk = b / kPerRow<Round>;  // packed rows of one block's k
  const bool native = Round && bf16_dot_native();

  // wp[r][j][m][k][q] = values[r, m, j*NR + q, k]: the (m, k) chain of output
  // columns j*NR.. of block row r, k-major (in pairs of k under bf16).
  ScratchLease wlease(tls_weights, static_cast<size_t>(d.value_count()) + kScratchSlack);
  float* wp = wlease.get();
  parallel_for(0, nob * a, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t r = blk / a, m = blk % a;
      for (int64_t j = 0; j < jn; ++j)
        bsr::pack_transposed<Round>(values + (blk * b + j * NR) * b, b, NR, b,
                                    wp + (r * jn + j) * panel + m * bk * NR, NR);
    }
  });

  const std::vector<int32_t> used = used_column_blocks(col_index, d);
  const TokenTiling tt = plan_tokens(n, d.in, MR, nob);
  // f32 rows without an activation are read where they lie (tile_kernel_rows);
  // rounded or activated ones are packed once per tile for every block row.
  const bool in_place =
      !Round && MR <= kInPlaceMaxRows && src.act == InputActivation::none && bsr::rows_in_place();
  parallel_for(0, tt.tiles * tt.groups, 1, [&](int64_t lo, int64_t hi) {
    std::optional<ScratchLease> tlease;
    if (!in_place) tlease.emplace(tls_tile, static_cast<size_t>(tt.mc * d.in) + kScratchSlack);
    float* xp = in_place ? nullptr : tlease->get();  // xp[p][col][MR]: x rows of panel p, column-major
    std::vector<const float*> tile_rows(in_place ? static_cast<size_t>(tt.mc) : 0);
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t tile = u / tt.groups, g = u % tt.groups;
      const int64_t t0 = tile * tt.mc, rows = std::min(tt.mc, n - t0);
      const int64_t panels = ceil_div(rows, MR);
      if (in_place) {
        row_pointers(tile_rows, panels * MR, rows,
                     [&](int64_t t) { return x + source_row(src, t0 + t) * d.in; });
      } else {
        for (int64_t p = 0; p < panels; ++p) {
          const int mr = static_cast<int>(std::min<int64_t>(MR, rows - p * MR));
          const float* row[MR];
          for (int i = 0; i < mr; ++i) row[i] = x + source_row(src, t0 + p * MR + i) * d.in;
          for (const int32_t c : used)
            bsr::pack_transposed_rows<Round>([&row, c, b](int i) { return row[i] + c * b; }, mr, b,
                                             xp + (p * d.in + c * bk) * MR, MR, src.act);
        }
      }
      const int64_t r0 = g * tt.per_group, r1 = std::min(nob, r0 + tt.per_group);
      NextTile next(tt, u, n, (r1 - r0) * jn * panels, x, d.in, y, d.out, src.rows, residual);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < jn; ++j)
          for (int64_t p = 0; p < panels; ++p) {
            const int mr = static_cast<int>(std::min<int64_t>(MR, rows - p * MR));
            const int64_t at = (t0 + p * MR) * d.out + r * b + j * NR;
            const float* bias_at = bias ? bias + r * b + j * NR : nullptr;
            if (in_place) {
              bsr::tile_kernel_rows<MR, NV>(a, b, tile_rows.data() + p * MR, col_index + r * a, b,
                                            wp + (r * jn + j) * panel, NR, y + at, d.out, bias_at, false, mr);
            } else {
              product_tile<MR, NV, Round>(native, a, bk, xp + p * d.in * MR, col_index + r * a, bk * MR, MR,
                                          wp + (r * jn + j) * panel, NR, y + at, d.out, bias_at, false, mr);
            }
            if (residual) bsr::add_to_tile<NV>(y + at, residual + at, d.out, mr);
            next.step();
          }
    }
  });
}

// Active blocks grouped by column block: entries start[c]..start[c+1] name the block
// rows (ascending) and flat block numbers r*a + m whose column block is c.
struct ColumnIndex {
  std::vector<int64_t> start;
  std::vector<int32_t> row;
  std::vector<int64_t> block;
};

ColumnIndex index_by_column(const int32_t* col_index, const BlockSparseDims& d) {
  const int64_t nib = d.col_blocks(), blocks = d.row_blocks() * d.active;
  ColumnIndex ix;
  ix.start.assign(static_cast<size_t>(nib + 1), 0);
  ix.row.resize(static_cast<size_t>(blocks));
  ix.block.resize(static_cast<size_t>(blocks));
  for (int64_t e = 0; e < blocks; ++e) ++ix.start[static_cast<size_t>(col_index[e]) + 1];
  for (int64_t c = 0; c < nib; ++c) ix.start[c + 1] += ix.start[c];
  std::vector<int64_t> fill(ix.start.begin(), ix.start.end() - 1);
  for (int64_t e = 0; e < blocks; ++e) {  // e ascends, so rows ascend within a column
    const int64_t slot = fill[static_cast<size_t>(col_index[e])]++;
    ix.row[static_cast<size_t>(slot)] = static_cast<int32_t>(e / d.active);
    ix.block[static_cast<size_t>(slot)] = e;
  }
  return ix;
}

template <int MR, int NV, bool Round>
void backward_input_fast(float* dx, const float* dy, const float* values, const int32_t* col_index, int64_t n,
                         const BlockSparseDims& d, bool overwrite) {
  constexpr int64_t NR = NV * kVec;
  const int64_t b = d.block, nib = d.col_blocks(), jn = b / NR;
  const int64_t bk = b / kPerRow<Round>;  // packed rows of one block's k
  const bool native = Round && bf16_dot_native();
  const ColumnIndex ix = index_by_column(col_index, d);

  // wt[c][j][e][i][q] = values[block_e, i, j*NR + q] for the blocks e of column c: the
  // (e, i) chain of input columns c*b + j*NR.., k-major. Panel (c, j) sits at
  // (start[c]*jn + j*count_c) * b * NR.
  ScratchLease wlease(tls_weights, static_cast<size_t>(d.value_count()) + kScratchSlack);
  float* wt = wlease.get();
  parallel_for(0, nib, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t s = ix.start[c], cnt = ix.start[c + 1] - s;
      for (int64_t j = 0; j < jn; ++j) {
        float* dst = wt + (s * jn + j * cnt) * b * NR;
        for (int64_t e = 0; e < cnt; ++e) {
          const float* block = values + ix.block[s + e] * b * b + j * NR;
          if constexpr (Round) {
            bsr::pack_row_pairs<NR>(block, b, b, dst + e * bk * NR);
          } else {
            bsr::pack_rows<NR>(block, b, b, dst + e * b * NR);
          }
        }
      }
    }
  });

  const TokenTiling tt = plan_tokens(n, d.out, MR, nib);
  const bool in_place = !Round && MR <= kInPlaceMaxRows && bsr::rows_in_place();  // as in forward_fast
  parallel_for(0, tt.tiles * tt.groups, 1, [&](int64_t lo, int64_t hi) {
    std::optional<ScratchLease> tlease;
    if (!in_place) tlease.emplace(tls_tile, static_cast<size_t>(tt.mc * d.out) + kScratchSlack);
    float* gp = in_place ? nullptr : tlease->get();  // gp[p][col][MR]: dy rows of panel p, column-major
    std::vector<const float*> tile_rows(in_place ? static_cast<size_t>(tt.mc) : 0);
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t tile = u / tt.groups, g = u % tt.groups;
      const int64_t t0 = tile * tt.mc, rows = std::min(tt.mc, n - t0);
      const int64_t panels = ceil_div(rows, MR);
      if (in_place) {
        row_pointers(tile_rows, panels * MR, rows, [&](int64_t t) { return dy + (t0 + t) * d.out; });
      } else {
        for (int64_t p = 0; p < panels; ++p) {
          const int mr = static_cast<int>(std::min<int64_t>(MR, rows - p * MR));
          bsr::pack_transposed<Round>(dy + (t0 + p * MR) * d.out, d.out, mr, d.out, gp + p * d.out * MR, MR);
        }
      }
      const int64_t c0 = g * tt.per_group, c1 = std::min(nib, c0 + tt.per_group);
      NextTile next(tt, u, n, (c1 - c0) * jn * panels, dy, d.out, dx, d.in);
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t s = ix.start[c], cnt = ix.start[c + 1] - s;
        for (int64_t j = 0; j < jn; ++j)
          for (int64_t p = 0; p < panels; ++p) {
            const int mr = static_cast<int>(std::min<int64_t>(MR, rows - p * MR));
            float* dx_tile = dx + (t0 + p * MR) * d.in + c * b + j * NR;
            if (cnt > 0 && in_place) {
              bsr::tile_kernel_rows<MR, NV>(cnt, b, tile_rows.data() + p * MR, ix.row.data() + s, b,
                                            wt + (s * jn + j * cnt) * b * NR, NR, dx_tile, d.in, nullptr,
                                            !overwrite, mr);
            } else if (cnt > 0) {
              product_tile<MR, NV, Round>(native, cnt, bk, gp + p * d.out * MR, ix.row.data() + s, bk * MR,
                                          MR, wt + (s * jn + j * cnt) * b * NR, NR, dx_tile, d.in, nullptr,
                                          !overwrite, mr);
            } else if (overwrite) {  // a column no block row reads: its gradient is zero
              for (int i = 0; i < mr; ++i) std::fill_n(dx_tile + i * d.in, NR, 0.0f);
            }
            next.step();
          }
      }
    }
  });
}

// Grad values over one chunk of kc tokens starting at t0: dvalues' blocks
// (accumulate) or a partial array of the same layout (written) get dy chunk^T x
// chunk. An operand whose bands are read by grad_values_pack_readers() blocks
// or more on average (every operand under bf16, whose tiles read rounded
// pairs) is first made contiguous, gc[r][t][b] and xc[c][t][b]; the other is
// read in place. A tile reads MR (NR) floats of each token's b-float band
// either way, in the same order, so packing does not change the sums. Chunks
// run in order (or their partials are added in order), so dvalues sums its
// tokens alike every time.
template <int MR, int NV, bool Round>
class GradValuesChunk {
 public:
  GradValuesChunk(const float* dy, const float* x, const int32_t* col_index, const BlockSparseDims& d,
                  const std::vector<int32_t>& used, const RowSource& src)
      : dy_(dy),
        x_(x),
        col_index_(col_index),
        d_(d),
        used_(used),
        src_(src),
        native_(Round && bf16_dot_native()),
        pack_dy_(Round || d.active >= bsr::grad_values_pack_readers()),
        pack_x_(Round || !src.plain() ||
                d.row_blocks() * d.active >=
                    bsr::grad_values_pack_readers() * static_cast<int64_t>(used.size())) {}

  bool packs() const { return pack_dy_ || pack_x_; }

  // Packed rows of a chunk of kc tokens: one per token, or per pair of tokens
  // under bf16 (a missing last token of a pair reads as zero).
  static int64_t packed_rows(int64_t kc) { return ceil_div(kc, kPerRow<Round>); }

  // Packed rows [t_lo, t_hi) of the chunk, row by row: the reads stream through
  // memory in order. gc [out, kc], xc [in, kc].
  void pack(float* gc, float* xc, int64_t t0, int64_t kc, int64_t t_lo, int64_t t_hi) const {
    const int64_t b = d_.block;
    if constexpr (Round) {
      for (int64_t tp = t_lo; tp < t_hi; ++tp) {
        const int64_t t = 2 * tp;
        const bool odd = t + 1 < kc;
        const float* g_row = dy_ + (t0 + t) * d_.out;
        for (int64_t r = 0; r < d_.row_blocks(); ++r)
          bsr::copy_pairs16(gc + (r * kc + tp) * b, odd ? g_row + d_.out + r * b : nullptr, g_row + r * b, b);
        const float* x_row = x_ + source_row(src_, t0 + t) * d_.in;
        const float* x_next = odd ? x_ + source_row(src_, t0 + t + 1) * d_.in : nullptr;
        for (const int32_t c : used_)
          bsr::copy_pairs16(xc + (c * kc + tp) * b, x_next ? x_next + c * b : nullptr, x_row + c * b, b,
                            src_.act);
      }
      return;
    }
    for (int64_t t = t_lo; t < t_hi; ++t) {
      const float* g_row = dy_ + (t0 + t) * d_.out;
      if (pack_dy_)
        for (int64_t r = 0; r < d_.row_blocks(); ++r)
          bsr::copy_floats16(gc + (r * kc + t) * b, g_row + r * b, b);
      const float* x_row = x_ + source_row(src_, t0 + t) * d_.in;
      if (src_.rows && t + 2 < t_hi) prefetch_span(x_ + source_row(src_, t0 + t + 2) * d_.in, d_.in);
      if (pack_x_)
        for (const int32_t c : used_) bsr::copy_floats16(xc + (c * kc + t) * b, x_row + c * b, b, src_.act);
    }
  }

  // t0: the chunk's first token, for the operands read in place.
  void tiles(float* dst, const float* gc, const float* xc, int64_t t0, int64_t kc, int64_t blk_lo,
             int64_t blk_hi, bool accumulate) const {
    constexpr int64_t NR = NV * kVec;
    const int64_t b = d_.block, a = d_.active;
    const int64_t g_step = pack_dy_ ? b : d_.out, x_step = pack_x_ ? b : d_.in;
    for (int64_t blk = blk_lo; blk < blk_hi; ++blk) {
      const int64_t r = blk / a, c = col_index_[blk];
      const float* g = pack_dy_ ? gc + r * kc * b : dy_ + t0 * d_.out + r * b;
      const float* xb = pack_x_ ? xc + c * kc * b : x_ + t0 * d_.in + c * b;
      float* dv = dst + blk * b * b;
      for (int64_t kp = 0; kp < b / NR; ++kp)
        for (int64_t ip = 0; ip < b / MR; ++ip)
          product_tile<MR, NV, Round>(native_, 1, packed_rows(kc), g + ip * MR, nullptr, 0, g_step,
                                      xb + kp * NR, x_step, dv + ip * MR * b + kp * NR, b, nullptr,
                                      accumulate, MR);
    }
  }

 private:
  const float* dy_;
  const float* x_;
  const int32_t* col_index_;
  const BlockSparseDims& d_;
  const std::vector<int32_t>& used_;
  RowSource src_;  // x's rows and activation; packed whenever not plain
  bool native_;
  bool pack_dy_, pack_x_;
};

// The chunks as the parallel work, their partials added in chunk order
// (core/chunk_fold.h): the same bits as the loop over chunks. Taken when the
// gradient is small (a partial of at most 1 MiB) and the active blocks are too
// few for the threads (the mixer's 32 at 16 threads) or the chunks are many.
// Measured on 2 threads at 4,096 tokens: 1.2x for [512, 512] and 1.1x for
// [2048, 512] at sparsity 0.9, the same for a dense [512, 512], slower for a
// dense [2048, 512] (4 MiB partials).
constexpr int64_t kChunkedMaxValues = int64_t{1} << 18;

bool values_by_chunks(int64_t n, const BlockSparseDims& d) {
  const int threads = num_threads();
  const int64_t chunks = ceil_div(n, kTokenChunk);
  if (threads <= 1 || in_serial_scope() || chunks < 2 || d.value_count() > kChunkedMaxValues) return false;
  return d.row_blocks() * d.active < 4 * threads || chunks >= 4 * threads;
}

template <int MR, int NV, bool Round>
void backward_values_fast(float* dvalues, const float* dy, const float* x, const int32_t* col_index,
                          int64_t n, const BlockSparseDims& d, const RowSource& src, bool overwrite) {
  const std::vector<int32_t> used = used_column_blocks(col_index, d);
  const GradValuesChunk<MR, NV, Round> chunk(dy, x, col_index, d, used, src);
  const int64_t kc_max = std::min(n, kTokenChunk);
  const int64_t blocks = d.row_blocks() * d.active;
  const size_t scratch = static_cast<size_t>((d.out + d.in) * kc_max) + kScratchSlack;

  if (values_by_chunks(n, d)) {
    const int64_t bb = d.block * d.block;
    fold_chunks_in_order<float>(
        ceil_div(n, kTokenChunk), blocks, bb,
        [&](int64_t c, float* out) {
          const int64_t t0 = c * kTokenChunk, kc = std::min(kTokenChunk, n - t0);
          ScratchLease clease(tls_chunk, scratch);
          float* gc = clease.get();
          float* xc = gc + d.out * kc_max;
          if (chunk.packs()) chunk.pack(gc, xc, t0, kc, 0, chunk.packed_rows(kc));
          chunk.tiles(out, gc, xc, t0, kc, 0, blocks, false);
        },
        [&](int64_t c, const float* in, int64_t lo, int64_t hi) {
          float* __restrict dv = dvalues;
          if (overwrite && c == 0)  // the first chunk's partial is stored
            std::copy(in + lo * bb, in + hi * bb, dv + lo * bb);
          else
            for (int64_t e = lo * bb; e < hi * bb; ++e) dv[e] = dv[e] + in[e];
        });
    return;
  }

  ScratchLease clease(tls_chunk, scratch);
  float* gc = clease.get();
  float* xc = gc + d.out * kc_max;
  for (int64_t t0 = 0; t0 < n; t0 += kTokenChunk) {
    const int64_t kc = std::min(kTokenChunk, n - t0);
    if (chunk.packs())
      parallel_for(0, chunk.packed_rows(kc), 16,
                   [&](int64_t lo, int64_t hi) { chunk.pack(gc, xc, t0, kc, lo, hi); });
    const bool accumulate = !overwrite || t0 > 0;  // the first chunk's tiles are stored
    parallel_for(0, blocks, 1,
                 [&](int64_t lo, int64_t hi) { chunk.tiles(dvalues, gc, xc, t0, kc, lo, hi, accumulate); });
  }
}

bool fast_path(int64_t n, const BlockSparseDims& d) { return n > 0 && d.block % kFastMultiple == 0; }

// The naive loops' operands under bf16 (block sizes the fast kernels do not
// take; not a hot path): rounded copies of count floats.
std::vector<float> rounded_flat(const float* x, int64_t count) { return rounded_copy(x, 1, count, count); }

template <bool Round>
void forward_shaped(float* y, const float* x, const float* values, const int32_t* col_index,
                    const float* bias, int64_t n, const BlockSparseDims& dims, const RowSource& src,
                    const float* residual) {
  if (is_wide(dims.block)) {
    forward_fast<bsr::kTokenWide.mr, bsr::kTokenWide.nv, Round>(y, x, values, col_index, bias, n, dims, src,
                                                                residual);
  } else {
    forward_fast<bsr::kTokenNarrow.mr, bsr::kTokenNarrow.nv, Round>(y, x, values, col_index, bias, n, dims,
                                                                    src, residual);
  }
}

template <bool Round>
void backward_input_shaped(float* dx, const float* dy, const float* values, const int32_t* col_index,
                           int64_t n, const BlockSparseDims& dims, bool overwrite) {
  if (is_wide(dims.block)) {
    backward_input_fast<bsr::kTokenWide.mr, bsr::kTokenWide.nv, Round>(dx, dy, values, col_index, n, dims,
                                                                       overwrite);
  } else {
    backward_input_fast<bsr::kTokenNarrow.mr, bsr::kTokenNarrow.nv, Round>(dx, dy, values, col_index, n, dims,
                                                                           overwrite);
  }
}

template <bool Round>
void backward_values_shaped(float* dvalues, const float* dy, const float* x, const int32_t* col_index,
                            int64_t n, const BlockSparseDims& dims, const RowSource& src, bool overwrite) {
  if (is_wide_grad(dims.block)) {
    backward_values_fast<bsr::kGradWide.mr, bsr::kGradWide.nv, Round>(dvalues, dy, x, col_index, n, dims, src,
                                                                      overwrite);
  } else {
    backward_values_fast<bsr::kGradNarrow.mr, bsr::kGradNarrow.nv, Round>(dvalues, dy, x, col_index, n, dims,
                                                                          src, overwrite);
  }
}

}  // namespace

void block_sparse_forward(float* y, const float* x, const float* values, const int32_t* col_index,
                          const float* bias, int64_t n, const BlockSparseDims& dims, ProductPrecision p,
                          const RowSource& src, const float* residual) {
  const bool bf16 = p == ProductPrecision::bf16;
  if (!fast_path(n, dims)) {
    std::vector<float> xs = src.plain() ? std::vector<float>() : source_rows(x, n, dims.in, src);
    if (!src.plain()) x = xs.data();
    if (!bf16) {
      block_sparse_forward_naive(y, x, values, col_index, bias, n, dims);
    } else {
      const std::vector<float> xr = rounded_flat(x, n * dims.in),
                               wr = rounded_flat(values, dims.value_count());
      block_sparse_forward_naive(y, xr.data(), wr.data(), col_index, bias, n, dims);
    }
    if (residual) axpy(y, residual, 1.0f, n * dims.out);
    return;
  }
  if (bf16) return forward_shaped<true>(y, x, values, col_index, bias, n, dims, src, residual);
  forward_shaped<false>(y, x, values, col_index, bias, n, dims, src, residual);
}

void block_sparse_backward_input(float* dx, const float* dy, const float* values, const int32_t* col_index,
                                 int64_t n, const BlockSparseDims& dims, ProductPrecision p, bool overwrite) {
  const bool bf16 = p == ProductPrecision::bf16;
  if (!fast_path(n, dims)) {
    if (!bf16) return block_sparse_backward_input_naive(dx, dy, values, col_index, n, dims, overwrite);
    const std::vector<float> gr = rounded_flat(dy, n * dims.out),
                             wr = rounded_flat(values, dims.value_count());
    return block_sparse_backward_input_naive(dx, gr.data(), wr.data(), col_index, n, dims, overwrite);
  }
  if (bf16) return backward_input_shaped<true>(dx, dy, values, col_index, n, dims, overwrite);
  backward_input_shaped<false>(dx, dy, values, col_index, n, dims, overwrite);
}

void block_sparse_backward_values(float* dvalues, const float* dy, const float* x, const int32_t* col_index,
                                  int64_t n, const BlockSparseDims& dims, ProductPrecision p,
                                  const RowSource& src, bool overwrite) {
  const bool bf16 = p == ProductPrecision::bf16;
  if (!fast_path(n, dims)) {
    std::vector<float> xs = src.plain() ? std::vector<float>() : source_rows(x, n, dims.in, src);
    if (!src.plain()) x = xs.data();
    if (!bf16) return block_sparse_backward_values_naive(dvalues, dy, x, col_index, n, dims, overwrite);
    const std::vector<float> gr = rounded_flat(dy, n * dims.out), xr = rounded_flat(x, n * dims.in);
    return block_sparse_backward_values_naive(dvalues, gr.data(), xr.data(), col_index, n, dims, overwrite);
  }
  if (bf16) return backward_values_shaped<true>(dvalues, dy, x, col_index, n, dims, src, overwrite);
  backward_values_shaped<false>(dvalues, dy, x, col_index, n, dims, src, overwrite);
}

SHAMN_ISA_END

namespace shamn::bsr {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::block_sparse_forward,
                            &::shamn::SHAMN_ISA_NS::block_sparse_backward_input,
                            &::shamn::SHAMN_ISA_NS::block_sparse_backward_values};
}  // namespace shamn::bsr
