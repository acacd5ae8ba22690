// The runtime's forward with a RoutingObserver that logs every choice.
#include "cli/shq_analysis.h"

#include <cmath>
#include <span>

namespace shamn {

namespace {

struct Logger : RoutingObserver {
  SelectionLog* log = nullptr;
  MoeOptions moe;
  MemoryOptions memory;
  void memory_reads(int64_t layer, const int32_t* slots, const float* weights, int64_t n) override {
    log->add_memory(layer, memory, slots, weights, n);
  }
  void moe_choices(int64_t layer, const int32_t* experts, const float* gates, int64_t n) override {
    log->add_moe(layer, moe, experts, gates, n);
  }
};

// The norms of a stored block-sparse matrix's active blocks, appended to `out`.
// values [nob, b, a, b]: output row r holds its a blocks' row r % b side by side.
void block_norms(const ShqFile& file, const std::string& prefix, const BlockSparseOptions& o,
                 std::vector<double>& out) {
  const ShqTensor& t = file.tensor(prefix + ".values");
  const int64_t b = o.block, a = o.active_blocks(), nob = o.out / b;
  WeightMatrix w = weight_matrix_view(t.dtype, t.shape, t.data);
  // The runtime's view (InferModel's binder): a row is its a segments of b values.
  w.rows = o.out;
  w.cols = a * b;
  w.segment = b;
  std::vector<double> ss(static_cast<size_t>(nob * a), 0.0);
  std::vector<float> row(static_cast<size_t>(a * b));
  for (int64_t r = 0; r < o.out; ++r) {
    std::fill(row.begin(), row.end(), 0.0f);
    w.add_row(r, 1.0f, row.data());
    for (int64_t m = 0; m < a; ++m)
      for (int64_t j = 0; j < b; ++j) {
        const double v = row[m * b + j];
        ss[(r / b) * a + m] += v * v;
      }
  }
  for (double s : ss) out.push_back(std::sqrt(s));
}

}  // namespace

std::vector<BlockNormStats> shq_block_norm_stats(const InferModel& model) {
  const ModelConfig& c = model.config();
  const MoeOptions moe = c.moe();
  std::vector<std::pair<std::string, std::vector<double>>> norms;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    norms.push_back({p + "mixer.out", {}});
    block_norms(model.file(), p + "mixer.out", c.mixer().out, norms.back().second);
    for (const char* kind : {"up", "down"}) {
      norms.push_back({p + "moe.experts.*." + kind, {}});
      for (int64_t e = 0; e < moe.experts(); ++e)
        block_norms(model.file(), p + "moe.experts." + std::to_string(e) + "." + kind,
                    std::string(kind) == "up" ? moe.up : moe.down, norms.back().second);
    }
  }
  return block_norm_stats(norms);
}

ModelAnalysis analyze_shq(const InferModel& model, const TokenFile& data, int64_t windows, int64_t seq_len) {
  const ModelConfig& c = model.config();
  ModelAnalysis a = analyze_windows(data, c.vocab_size, windows, seq_len,
                                    [&](const int32_t* tokens, int64_t T, SelectionLog& log, float* logits) {
                                      Logger logger;
                                      logger.log = &log;
                                      logger.moe = c.moe();
                                      logger.memory = c.memory();
                                      DecodeState state = model.new_state();
                                      StreamStep step{&state, tokens, T, /*all_logits=*/true};
                                      step.observer = &logger;
                                      model.forward(std::span(&step, 1), logits);
                                    });
  const ShqTensor& idx = model.file().tensor("embed.bucket_index");
  const Tensor bucket_index = Tensor::from_data<int32_t>(
      idx.shape, std::span<const int32_t>(static_cast<const int32_t*>(idx.data), shape_numel(idx.shape)));
  a.embed = embedding_stats(bucket_index, c.embed().buckets);
  a.block_sparse = shq_block_norm_stats(model);
  return a;
}

}  // namespace shamn
