#pragma once
// Internal to the runtime's forward (infer_model.cpp and the files it calls
// into): a model file's weights as the forward reads them, which LoRA adapter
// each row uses, and the grain of the forward's parallel loops.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "infer/lora_adapter.h"
#include "infer/quant_blocks.h"
#include "infer/weight_matrix.h"

namespace shamn::forward_detail {

// Multiply-adds per parallel task: below this a loop runs on the calling
// thread, so a decode step's small matrices do not pay for task dispatch.
constexpr int64_t kTaskMacs = 1 << 15;

inline int64_t grain_for(int64_t macs_per_item) {
  return std::max<int64_t>(1, kTaskMacs / std::max<int64_t>(macs_per_item, 1));
}

struct Dense {
  WeightMatrix w;               // [out, in]
  const float* bias = nullptr;  // [out] or null
};

// A BlockSparseLinear as the runtime stores it: values [nob, b, a, b] (output
// row r*b+i holds its a active blocks side by side), each b-value segment
// quantised on its own, so one output row is a * quant_blocks(b) blocks.
struct BlockSparse {
  int64_t in = 0, out = 0, block = 0, active = 0;
  WeightMatrix values;                                            // rows = out, cols = active * block
  const int32_t* col_index = nullptr;                             // [nob, a]
  const float* bias = nullptr;                                    // [out]
  int64_t segment_blocks() const { return quant_blocks(block); }  // per b-value segment
};

struct Expert {
  BlockSparse up, down;
};

struct Layer {
  const float* mix_gain = nullptr;
  const float* conv = nullptr;  // [D, K]
  BlockSparse mixer_out;
  bool has_memory = false;
  const float* mem_gain = nullptr;
  Dense query;
  WeightMatrix keys1, keys2, mem_values;  // [n, dh], [n, dh], [n^2, D]
  const float* moe_gain = nullptr;
  WeightMatrix router_group, router_expert;  // [G, D], [G*E, D]
  std::vector<Expert> experts;
  // Profiler scope names: "layers.3.mixer", ...
  const char* mixer_scope = nullptr;
  const char* memory_scope = nullptr;
  const char* moe_scope = nullptr;
};

// Which LoRA adapter each row of a forward uses: `list` holds the steps'
// distinct adapters, of_row[t] an index into it or -1 (the bare base).
struct Adapters {
  std::span<const LoraAdapter* const> list;
  const int32_t* of_row = nullptr;  // null: no row uses one
  Adapters from_row(int64_t r0) const { return {list, of_row ? of_row + r0 : nullptr}; }
};

}  // namespace shamn::forward_detail
