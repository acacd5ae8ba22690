#pragma once
// `shamn analyze MODEL.shq`: the tables of train/model_analysis.h for a model
// file, measured with the runtime's own forward on the weights as stored
// (int8 routers route as int8 does). Block norms are of the dequantised
// blocks, so an f32 export gives its checkpoint's.
#include <cstdint>

#include "data/token_file.h"
#include "infer/infer_model.h"
#include "train/model_analysis.h"

namespace shamn {

ModelAnalysis analyze_shq(const InferModel& model, const TokenFile& data, int64_t windows, int64_t seq_len);

// The block-sparse matrices' active-block norms, per layer and kind (experts pooled).
std::vector<BlockNormStats> shq_block_norm_stats(const InferModel& model);

}  // namespace shamn
