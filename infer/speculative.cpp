#include "infer/speculative.h"

#include <algorithm>

#include "core/check.h"

namespace shamn {

void check_draft_compatible(const InferModel& target, const std::string& target_name, const InferModel& draft,
                            const std::string& draft_name) {
  SHAMN_INPUT_CHECK(draft.vocab_size() == target.vocab_size(), "--draft '", draft_name, "' has vocab_size ",
                    draft.vocab_size(), " but the model '", target_name, "' has ", target.vocab_size(),
                    ": the draft must share the target's vocabulary");
  SHAMN_INPUT_CHECK(!draft.tokenizer() || !target.tokenizer() ||
                        draft.tokenizer()->to_text() == target.tokenizer()->to_text(),
                    "--draft '", draft_name, "' embeds a different tokenizer from the model '", target_name,
                    "': the draft must share the target's tokenizer");
}

void check_speculative_request(const SamplingOptions& sampling, bool logprobs) {
  SHAMN_INPUT_CHECK(!logprobs && !sampling.adjusts_logits(),
                    "logprobs, frequency and presence penalties and logit_bias are not available with a "
                    "draft model (speculative decoding)");
}

SpeculativeDecoder::SpeculativeDecoder(const InferModel& target, const InferModel& draft,
                                       const SamplingOptions& sampling, int64_t draft_tokens,
                                       const LoraAdapter* target_adapter)
    : target_(target),
      draft_(draft),
      target_adapter_(target_adapter),
      sampler_(sampling),
      k_(draft_tokens),
      vocab_(target.vocab_size()),
      target_state_(target.new_state()),
      draft_state_(draft.new_state()) {
  SHAMN_INPUT_CHECK(draft_tokens >= 1 && draft_tokens <= kMaxDraftTokens, "--draft-tokens ", draft_tokens,
                    " must be in [1, ", kMaxDraftTokens, "]");
  SHAMN_CHECK(draft.vocab_size() == vocab_, "the draft's vocabulary differs from the target's");
  check_speculative_request(sampling, false);
  q_.resize(static_cast<size_t>(k_));
}

void SpeculativeDecoder::start(std::span<const int32_t> prompt) {
  SHAMN_CHECK(!prompt.empty() && pending_ < 0, "start() takes a non-empty prompt, once");
  // Both models run all but the last prompt token now; the first round runs
  // that one with the drafts (the target) or before drafting (the draft).
  const auto n = static_cast<int64_t>(prompt.size()) - 1;
  if (n > 0) {
    target_.forward(prompt.data(), n, target_state_, nullptr, false, target_adapter_);
    draft_.forward(prompt.data(), n, draft_state_, nullptr, false);
  }
  pending_ = prompt.back();
  draft_pending_.assign(1, pending_);
}

void SpeculativeDecoder::run(const InferModel& m, const LoraAdapter* adapter, DecodeState& state,
                             std::span<const int32_t> tokens, MixerInputs& record, bool all_logits,
                             Buffer<float>& logits) const {
  const auto n = static_cast<int64_t>(tokens.size());
  StreamStep step{&state, tokens.data(), n, all_logits, &record};
  step.adapter = adapter;
  logits.reserve_at_least((all_logits ? n : 1) * vocab_);
  m.forward(std::span(&step, 1), logits.data());
}

void SpeculativeDecoder::densify(const TokenDistribution& d, std::vector<double>& p) const {
  p.assign(static_cast<size_t>(vocab_), 0.0);
  for (size_t i = 0; i < d.tokens.size(); ++i) p[d.tokens[i]] = d.weights[i] / d.total;
}

bool SpeculativeDecoder::accept(int32_t x, const std::vector<double>& p, const std::vector<double>& q,
                                int32_t* out) {
  // Keep x with probability min(1, p(x) / q(x)); q(x) > 0, the draft drew x.
  if (p[x] >= q[x] || sampler_.uniform() * q[x] < p[x]) return true;
  // Rejected: a draw from normalize(max(0, p - q)), the part of p that the
  // draft's proposals under-cover.
  *out = draw_residual(p, q, sampler_.uniform(), residual_);
  return false;
}

int32_t draw_residual(const std::vector<double>& p, const std::vector<double>& q, double u,
                      std::vector<double>& residual) {
  residual.resize(p.size());
  double total = 0.0;
  // Its mass is 1 - sum min(p, q) > 0 in exact arithmetic, after a rejection.
  for (size_t v = 0; v < p.size(); ++v) total += residual[v] = p[v] - q[v] > 0.0 ? p[v] - q[v] : 0.0;
  if (!(total > 0.0)) {
    total = 0.0;
    for (size_t v = 0; v < p.size(); ++v) total += residual[v] = p[v] > 0.0 ? p[v] : 0.0;
  }
  u *= total;
  int32_t last = 0;
  for (size_t v = 0; v < p.size(); ++v) {
    if (residual[v] <= 0.0) continue;
    last = static_cast<int32_t>(v);
    u -= residual[v];
    if (u < 0.0) break;
  }
  return last;
}

SpeculativeRound SpeculativeDecoder::next(int64_t max_drafts) {
  SHAMN_CHECK(pending_ >= 0, "start() the decoder before next()");
  const int64_t k = std::clamp<int64_t>(max_drafts, 0, k_);
  const int64_t V = vocab_;
  const auto draft_fed_before = static_cast<int64_t>(draft_pending_.size());

  // Draft: k tokens, one forward each, every one drawn from the draft's own
  // sampling distribution (which the acceptance rule needs whole).
  drafts_.clear();
  if (k > 0) {
    draft_before_ = draft_state_;
    draft_record_.clear();
    run(draft_, nullptr, draft_state_, draft_pending_, draft_record_, false, logits_);
    for (int64_t i = 0; i < k; ++i) {
      if (i > 0)
        run(draft_, nullptr, draft_state_, std::span(&drafts_.back(), 1), draft_record_, false, logits_);
      sampler_.distribution(logits_.data(), V, dist_);
      densify(dist_, q_[i]);
      drafts_.push_back(sampler_.draw(dist_));
    }
  }

  // Verify: the target runs the pending token and the k drafts in one pass;
  // row i is its distribution after drafts 1..i, row k the bonus token's.
  std::vector<int32_t> verify(1, pending_);
  verify.insert(verify.end(), drafts_.begin(), drafts_.end());
  target_before_ = target_state_;
  target_record_.clear();
  run(target_, target_adapter_, target_state_, verify, target_record_, true, logits_);
  int64_t kept = 0;
  int32_t next = -1;
  for (; kept < k; ++kept) {
    sampler_.distribution(logits_.data() + kept * V, V, dist_);
    densify(dist_, p_);
    if (!accept(drafts_[kept], p_, q_[kept], &next)) break;
  }
  if (kept == k) next = sampler_.sample(logits_.data() + k * V, V);

  // Roll back what the rejected drafts left in the states.
  if (kept < k) target_.rewind(target_state_, target_before_, target_record_, kept + 1);
  if (k > 0) {
    // The draft ran its pending tokens and drafts 1..k-1; it keeps the pending
    // ones and the accepted drafts among those.
    const int64_t keep = draft_fed_before + std::min(kept, k - 1);
    if (keep < draft_fed_before + k - 1) draft_.rewind(draft_state_, draft_before_, draft_record_, keep);
    draft_pending_.clear();
    if (kept == k) draft_pending_.push_back(drafts_.back());
  }
  draft_pending_.push_back(next);
  pending_ = next;

  SpeculativeRound round;
  round.tokens.assign(drafts_.begin(), drafts_.begin() + kept);
  round.tokens.push_back(next);
  round.drafted = k;
  round.accepted = kept;
  drafted_ += k;
  accepted_ += kept;
  return round;
}

}  // namespace shamn
