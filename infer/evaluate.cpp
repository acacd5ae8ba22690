#include "infer/evaluate.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <vector>

#include "core/buffer.h"
#include "core/check.h"
#include "core/kernels/activation.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace shamn {

namespace {

// Windows a thread takes per round when windows run concurrently (evaluate).
constexpr int64_t kWindowsPerThreadRound = 4;

// log-softmax of one row into lp [V]; returns the argmax (lowest id on ties).
int64_t log_softmax_row(const float* x, int64_t V, std::vector<double>& lp) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (x[v] > x[best]) best = v;
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v]) - x[best]);
  const double lse = x[best] + std::log(sum);
  lp.resize(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) lp[v] = x[v] - lse;
  return best;
}

int64_t window_count(const TokenFile& data, int64_t T, int64_t max_windows) {
  SHAMN_INPUT_CHECK(T >= 1, "--seq-len must be >= 1");
  int64_t windows = (data.size() - 1) / T;
  SHAMN_INPUT_CHECK(windows >= 1, "token file '", data.path(), "' has ", data.size(),
                    " tokens: fewer than one window of --seq-len ", T, " + 1");
  return max_windows > 0 ? std::min(windows, max_windows) : windows;
}

}  // namespace

double EvalResult::perplexity() const { return std::exp(loss); }

LossFunction losses_from_logits(LogitFunction logits, int64_t vocab) {
  return [logits = std::move(logits), vocab](const int32_t* tokens, int64_t T, const int32_t* targets,
                                             double* losses) {
    Buffer<float> x(T * vocab);
    {
      const ProfileScope scope("model_logits", ProfileCategory::eval);
      logits(tokens, T, x.data());
    }
    const ProfileScope scope("score_positions", ProfileCategory::eval);
    // The loss alone needs only the row's logsumexp: vectorised float exps (a
    // double exp per vocabulary entry was half of an evaluation).
    parallel_for(0, T, 8, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const float* row = x.data() + t * vocab;
        losses[t] = logsumexp(row, vocab) - row[targets[t]];
      }
    });
  };
}

EvalResult evaluate(const TokenFile& data, int64_t vocab, int64_t T, int64_t max_windows,
                    const LossFunction& model, int64_t concurrent_windows) {
  const int64_t windows = window_count(data, T, max_windows);
  const int64_t P = std::max<int64_t>(1, concurrent_windows);
  // Concurrent windows go in rounds of several a thread, handed out as threads
  // come free: the vCPUs of a VM seldom run at one speed, and a round of one
  // window a thread would wait for the slowest every time. Rounds bound the
  // losses kept for the ordered sum.
  const int64_t per_round = P == 1 ? 1 : std::min(windows, kWindowsPerThreadRound * P);
  std::vector<Tensor> round(static_cast<size_t>(per_round));
  std::vector<double> loss(static_cast<size_t>(per_round * T));
  // A window's failure (a bad token in it, or its model call) is held until
  // its round ends and the lowest window's is raised: the error one at a time
  // would give, whichever thread failed first.
  std::vector<std::exception_ptr> failure(static_cast<size_t>(per_round));
  const auto run_window = [&](int64_t i, int64_t w) {
    const ProfileScope window_scope("eval_window", ProfileCategory::eval);
    try {
      round[i] = data.window(w * T, T + 1, vocab);
      const int32_t* tok = round[i].data<int32_t>();
      const ProfileScope scope("model_losses", ProfileCategory::eval);
      model(tok, T, tok + 1, loss.data() + i * T);
    } catch (...) {
      failure[static_cast<size_t>(i)] = std::current_exception();
    }
  };
  double sum = 0;
  // A round is a profiler step: with P > 1 the first holds every thread's
  // first (cold) window.
  for (int64_t w0 = 0, step = 1; w0 < windows; w0 += per_round, ++step) {
    profile_begin_step(step);
    const int64_t m = std::min(per_round, windows - w0);
    if (m == 1) {
      run_window(0, w0);
    } else {
      parallel_for(0, m, 1, [&](int64_t lo, int64_t hi) {
        const SerialScope serial;
        for (int64_t i = lo; i < hi; ++i) run_window(i, w0 + i);
      });
    }
    for (int64_t i = 0; i < m; ++i)
      if (failure[static_cast<size_t>(i)]) std::rethrow_exception(failure[static_cast<size_t>(i)]);
    for (int64_t i = 0; i < m * T; ++i) sum += loss[i];  // in window, then position order
  }
  EvalResult r;
  r.windows = windows;
  r.tokens = windows * T;
  r.loss = sum / static_cast<double>(r.tokens);
  return r;
}

EvalResult evaluate(const TokenFile& data, int64_t vocab, int64_t T, int64_t max_windows,
                    const LogitFunction& model, const LogitFunction* reference) {
  if (!reference) return evaluate(data, vocab, T, max_windows, losses_from_logits(model, vocab));
  const int64_t windows = window_count(data, T, max_windows);
  EvalResult r;
  Buffer<float> logits(T * vocab), ref(T * vocab);
  std::vector<int32_t> inputs(static_cast<size_t>(T));
  // Per position: loss, ref loss, KL, agreement; summed in position order at the end.
  std::vector<double> loss(static_cast<size_t>(T)), ref_loss(loss.size()), kl(loss.size()),
      agree(loss.size());
  double sum_loss = 0, sum_ref = 0, sum_kl = 0, sum_agree = 0;
  for (int64_t w = 0; w < windows; ++w) {
    profile_begin_step(w + 1);
    const ProfileScope window_scope("eval_window", ProfileCategory::eval);
    const Tensor win = data.window(w * T, T + 1, vocab);
    const int32_t* tok = win.data<int32_t>();
    std::copy_n(tok, T, inputs.data());
    {
      const ProfileScope scope("model_logits", ProfileCategory::eval);
      model(inputs.data(), T, logits.data());
    }
    {
      const ProfileScope scope("reference_logits", ProfileCategory::eval);
      (*reference)(inputs.data(), T, ref.data());
    }
    const ProfileScope scope("score_positions", ProfileCategory::eval);
    parallel_for(0, T, 8, [&](int64_t lo, int64_t hi) {
      std::vector<double> lp, lq;
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t top = log_softmax_row(logits.data() + t * vocab, vocab, lp);
        loss[t] = -lp[tok[t + 1]];
        const int64_t ref_top = log_softmax_row(ref.data() + t * vocab, vocab, lq);
        ref_loss[t] = -lq[tok[t + 1]];
        double k = 0.0;
        for (int64_t v = 0; v < vocab; ++v) k += std::exp(lq[v]) * (lq[v] - lp[v]);
        kl[t] = k;
        agree[t] = top == ref_top ? 1.0 : 0.0;
      }
    });
    for (int64_t t = 0; t < T; ++t) {
      sum_loss += loss[t];
      sum_ref += ref_loss[t];
      sum_kl += kl[t];
      sum_agree += agree[t];
    }
  }
  r.windows = windows;
  r.tokens = windows * T;
  const double n = static_cast<double>(r.tokens);
  r.loss = sum_loss / n;
  r.reference_loss = sum_ref / n;
  r.mean_kl = sum_kl / n;
  r.top1_agreement = sum_agree / n;
  return r;
}

}  // namespace shamn
