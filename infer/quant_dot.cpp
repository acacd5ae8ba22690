#include "infer/quant_dot.h"

#include <atomic>
#include <cstdlib>

#include "core/check.h"
#include "core/parallel.h"
#include "infer/quant_dot_paths.h"

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

std::atomic<QuantKernel>& current_kernel() {
  static std::atomic<QuantKernel> kernel{default_quant_kernel()};
  return kernel;
}

// Rows per task: a 512-block row is ~18 KB of Q8 weights, so 16 rows amortise
// the task overhead while a 512-row matrix still splits across cores.
constexpr int64_t kRowGrain = 16;

}  // namespace

bool quant_kernel_supported(QuantKernel k) {
  __builtin_cpu_init();
  switch (k) {
    case QuantKernel::scalar:
      return true;
    case QuantKernel::avx2:
      return __builtin_cpu_supports("avx2");
    case QuantKernel::avx512:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

QuantKernel best_quant_kernel() {
  if (quant_kernel_supported(QuantKernel::avx512)) return QuantKernel::avx512;
  if (quant_kernel_supported(QuantKernel::avx2)) return QuantKernel::avx2;
  return QuantKernel::scalar;
}

QuantKernel default_quant_kernel() {
  const char* forced = std::getenv("SHAMN_KERNEL");
  if (forced == nullptr || *forced == '\0') return best_quant_kernel();
  for (QuantKernel k : {QuantKernel::scalar, QuantKernel::avx2, QuantKernel::avx512}) {
    if (std::string(forced) != quant_kernel_name(k)) continue;
    SHAMN_INPUT_CHECK(quant_kernel_supported(k), "SHAMN_KERNEL=", forced,
                      ": this CPU cannot run it; its best is ", quant_kernel_name(best_quant_kernel()));
    return k;
  }
  SHAMN_INPUT_CHECK(false, "SHAMN_KERNEL='", forced,
                    "' is unknown: use scalar, avx2 or avx512 (or unset it)");
  return QuantKernel::scalar;
}

const char* quant_kernel_name(QuantKernel k) {
  switch (k) {
    case QuantKernel::scalar:
      return "scalar";
    case QuantKernel::avx2:
      return "avx2";
    case QuantKernel::avx512:
      return "avx512";
  }
  return "?";
}

QuantKernel quant_kernel_from_string(const std::string& name) {
  for (QuantKernel k : {QuantKernel::scalar, QuantKernel::avx2, QuantKernel::avx512}) {
    if (name != quant_kernel_name(k)) continue;
    SHAMN_INPUT_CHECK(quant_kernel_supported(k), "--kernel ", name,
                      ": this CPU cannot run it; its best is --kernel ",
                      quant_kernel_name(best_quant_kernel()));
    return k;
  }
  SHAMN_INPUT_CHECK(false, "--kernel '", name, "' is unknown: use scalar, avx2 or avx512");
  return QuantKernel::scalar;
}

void set_quant_kernel(QuantKernel k) {
  SHAMN_INPUT_CHECK(quant_kernel_supported(k), "quant kernel ", quant_kernel_name(k),
                    " needs CPU features this machine lacks; its best is ",
                    quant_kernel_name(best_quant_kernel()));
  current_kernel().store(k);
}

QuantKernel quant_kernel() { return current_kernel().load(); }

float dot_q8_q8(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  switch (quant_kernel()) {
    case QuantKernel::avx512:
      return quant_detail::dot_q8_q8_avx512(a, b, blocks);
    case QuantKernel::avx2:
      return quant_detail::dot_q8_q8_avx2(a, b, blocks);
    case QuantKernel::scalar:
      break;
  }
  return dot_scalar(a, b, blocks);
}

float dot_q4_q8(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  switch (quant_kernel()) {
    case QuantKernel::avx512:
      return quant_detail::dot_q4_q8_avx512(w, x, blocks);
    case QuantKernel::avx2:
      return quant_detail::dot_q4_q8_avx2(w, x, blocks);
    case QuantKernel::scalar:
      break;
  }
  return dot_scalar(w, x, blocks);
}

void dot_rows_q8(const BlockQ8* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y) {
  switch (quant_kernel()) {
    case QuantKernel::avx512:
      return quant_detail::dot_rows_q8_q8_avx512(W, rows, blocks_per_row, x, y);
    case QuantKernel::avx2:
      return quant_detail::dot_rows_q8_q8_avx2(W, rows, blocks_per_row, x, y);
    case QuantKernel::scalar:
      break;
  }
  for (int64_t r = 0; r < rows; ++r) y[r] = dot_scalar(W + r * blocks_per_row, x, blocks_per_row);
}

void dot_rows_q4(const BlockQ4* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y) {
  switch (quant_kernel()) {
    case QuantKernel::avx512:
      return quant_detail::dot_rows_q4_q8_avx512(W, rows, blocks_per_row, x, y);
    case QuantKernel::avx2:
      return quant_detail::dot_rows_q4_q8_avx2(W, rows, blocks_per_row, x, y);
    case QuantKernel::scalar:
      break;
  }
  for (int64_t r = 0; r < rows; ++r) y[r] = dot_scalar(W + r * blocks_per_row, x, blocks_per_row);
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
