#pragma once
// `shamn analyze`: how a trained model's sparse parts are used, measured on
// windows of a token file with the checkpoint's own (autograd) forward. Shares
// are of selections (a token picks k experts, reads topk memory slots);
// entropies are in nats, beside the uniform maximum log(count).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "layers/shamn_model.h"

namespace shamn {

struct MoeLayerStats {
  int64_t layer = 0, tokens = 0, k = 0;
  std::vector<double> expert_share;     // [G*E] selections of each expert / (tokens * k)
  std::vector<double> group_share;      // [G] the same summed per group
  double entropy = 0, max_entropy = 0;  // of expert_share; log(G*E)
  double busiest_share = 0;
  int64_t busiest_expert = 0, never_chosen = 0;
  double mean_gate_first = 0, mean_gate_second = 0;  // normalised gates; second NaN when k = 1
};

struct MemoryLayerStats {
  int64_t layer = 0, slots = 0, reads = 0;  // reads = tokens * topk
  int64_t slots_read = 0;                   // read at least once
  double top1pct_share = 0;                 // of reads, by the ceil(1%) most-read slots
  double entropy = 0, max_entropy = 0;      // of slot use; log(slots)
  double mean_margin = 0;                   // mean over tokens of score_1 - score_topk
  std::vector<int64_t> slot_reads;          // [slots]
};

struct EmbeddingStats {
  int64_t vocab = 0, buckets = 0, hashes = 0;
  double tokens_per_bucket_mean = 0;  // (token, hash) entries per bucket: V * h / buckets
  int64_t tokens_per_bucket_max = 0, empty_buckets = 0;
  // Token pairs whose buckets are the same in every hash (as multisets: the
  // embedding sums over hashes), which only their importance weights tell apart.
  int64_t colliding_pairs = 0;
  double colliding_pair_share = 0;  // of V (V - 1) / 2
};

// Targets grouped by their token's frequency in the whole data file: the token
// types that occur, ranked by count, cut into thirds (rare, middle, frequent).
struct FrequencyThird {
  std::string name;
  int64_t types = 0, min_count = 0, max_count = 0;
  int64_t targets = 0;  // analysed positions whose target is in this third
  double loss = 0;      // their mean cross-entropy (NaN when none)
};

// The Frobenius norms of every active block of one kind of block-sparse matrix
// in one layer ("layers.0.mixer.out", "layers.0.moe.experts.*.up").
struct BlockNormStats {
  std::string name;
  int64_t blocks = 0;
  double min = 0, median = 0, max = 0, cv = 0;  // cv: standard deviation / mean
};

struct ModelAnalysis {
  int64_t windows = 0, seq_len = 0, tokens = 0;
  double loss = 0;  // mean cross-entropy over every analysed position
  std::vector<MoeLayerStats> moe;
  std::vector<MemoryLayerStats> memory;
  EmbeddingStats embed;
  std::vector<FrequencyThird> thirds;
  std::vector<BlockNormStats> block_sparse;
};

// The statistics of one batch of routing decisions (tests feed these directly).
// experts: int32 [N, k]; gates: [N, k] in selection order.
MoeLayerStats moe_stats(int64_t layer, const int32_t* experts, const float* gates, int64_t N, int64_t k,
                        int64_t groups, int64_t experts_per_group);
// slots: int32 [N, topk]; weights: [N, topk] softmax of the scores, best first.
MemoryLayerStats memory_stats(int64_t layer, const int32_t* slots, const float* weights, int64_t N,
                              int64_t topk, int64_t num_slots);
EmbeddingStats embedding_stats(const Tensor& bucket_index, int64_t buckets);
// losses[i], targets[i]: each analysed position; counts[t]: token t's count in the data.
std::vector<FrequencyThird> frequency_thirds(const std::vector<int64_t>& counts,
                                             const std::vector<double>& losses,
                                             const std::vector<int32_t>& targets);
std::vector<BlockNormStats> block_norm_stats(const Shamn& model);
// One row per matrix kind, in the order given: the spread of its block norms.
std::vector<BlockNormStats> block_norm_stats(
    const std::vector<std::pair<std::string, std::vector<double>>>& norms);

// Every layer's selections, window after window, as a forward reports them
// (the checkpoint's autograd model or the runtime's).
struct SelectionLog {
  struct Moe {
    int64_t k = 0, groups = 0, experts_per_group = 0;
    std::vector<int32_t> experts;  // [tokens, k]
    std::vector<float> gates;      // [tokens, k]
  };
  struct Memory {
    int64_t topk = 0, slots = 0;
    std::vector<int32_t> read;   // [tokens, topk]
    std::vector<float> weights;  // [tokens, topk]
  };
  std::map<int64_t, Moe> moe;
  std::map<int64_t, Memory> memory;
  void add_moe(int64_t layer, const MoeOptions& o, const int32_t* experts, const float* gates, int64_t n);
  void add_memory(int64_t layer, const MemoryOptions& o, const int32_t* slots, const float* weights,
                  int64_t n);
};

// Runs one window, tokens [T], from an empty history: logits [T, V], its
// selections appended to the log.
using WindowForward = std::function<void(const int32_t* tokens, int64_t T, SelectionLog& log, float* logits)>;

// Windows i = 0..windows-1 of seq_len + 1 tokens at i * seq_len (inputs and
// shifted targets, as `shamn loss`), clipped to what the file holds: the loss,
// its frequency thirds, the MoE and memory tables. embed and block_sparse are
// the caller's (they come from the weights, not the forward).
ModelAnalysis analyze_windows(const TokenFile& data, int64_t vocab, int64_t windows, int64_t seq_len,
                              const WindowForward& forward);
// analyze_windows with the checkpoint's own model, plus its embedding and block norms.
ModelAnalysis analyze_model(const Shamn& model, const TokenFile& data, int64_t windows, int64_t seq_len);

}  // namespace shamn
