#pragma once
// Perplexity over a token file, as llama.cpp's perplexity tool reports it: the
// file is cut into consecutive windows of T + 1 tokens (inputs t, targets
// t + 1), each window starts from an empty state, and every position counts.
// With a reference model it also reports, per position, the KL divergence
// KL(P_ref || P_model) of the next-token distributions and whether both pick
// the same top-1 token.
#include <cstdint>
#include <functional>

#include "data/token_file.h"

namespace shamn {

// Fills logits [T, V] for the window tokens [T].
using LogitFunction = std::function<void(const int32_t* tokens, int64_t T, float* logits)>;

// Fills losses [T]: each position's cross-entropy (nats) against targets [T].
using LossFunction =
    std::function<void(const int32_t* tokens, int64_t T, const int32_t* targets, double* losses)>;

// The loss function of a logit function: logits [T, V], then each row's logsumexp.
LossFunction losses_from_logits(LogitFunction logits, int64_t vocab);

struct EvalResult {
  int64_t windows = 0, tokens = 0;
  double loss = 0.0;  // mean cross-entropy, nats
  double perplexity() const;
  // With a reference only:
  double reference_loss = 0.0;
  double mean_kl = 0.0;         // mean over positions of KL(P_ref || P_model), nats
  double top1_agreement = 0.0;  // fraction of positions where the argmaxes agree
};

// max_windows 0 = every full window of the file. concurrent_windows > 1 runs
// that many windows at once, one thread each with its loops inline (the model
// must allow concurrent calls), instead of one window on every thread: windows
// are independent, and each one's rows on a single thread split no products.
// The sum runs in window then position order either way, so the result is the
// same whenever a window's losses do not depend on the thread count. When
// windows fail, the lowest one's error is raised, as one at a time would.
EvalResult evaluate(const TokenFile& data, int64_t vocab, int64_t T, int64_t max_windows,
                    const LossFunction& model, int64_t concurrent_windows = 1);
// With a reference: both models' full logits per window (for the KL and top-1).
EvalResult evaluate(const TokenFile& data, int64_t vocab, int64_t T, int64_t max_windows,
                    const LogitFunction& model, const LogitFunction* reference = nullptr);

}  // namespace shamn
