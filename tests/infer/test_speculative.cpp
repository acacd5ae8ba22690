// Speculative decoding: rewinding a state is exact, greedy output is plain
// greedy's token for token, and sampled output has the target's distribution.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/tokenizer.h"
#include "infer/export_model.h"
#include "infer/infer_model.h"
#include "infer/infer_test_model.h"
#include "infer/lora_test_adapter.h"
#include "infer/sampler.h"
#include "infer/speculative.h"

namespace shamn {
namespace {

using test::model_toml;
using test::random_tokens;
using test::TestModel;

bool same_state(const DecodeState& a, const DecodeState& b) {
  if (a.position != b.position || a.history.size() != b.history.size()) return false;
  for (size_t l = 0; l < a.history.size(); ++l)
    if (a.history[l].size() != b.history[l].size() ||
        std::memcmp(a.history[l].data(), b.history[l].data(), a.history[l].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// Plain greedy decoding: n tokens after the prompt, one forward each.
std::vector<int32_t> plain_greedy(const InferModel& m, const std::vector<int32_t>& prompt, int64_t n,
                                  const LoraAdapter* adapter = nullptr) {
  std::vector<float> logits(static_cast<size_t>(m.vocab_size()));
  DecodeState s = m.new_state();
  m.forward(prompt.data(), static_cast<int64_t>(prompt.size()), s, logits.data(), false, adapter);
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < n) {
    out.push_back(argmax_logit(logits.data(), m.vocab_size()));
    m.forward(&out.back(), 1, s, logits.data(), false, adapter);
  }
  return out;
}

// Speculative decoding of at least n tokens (the last round may overshoot), rounds of up to k drafts.
std::vector<int32_t> speculative(SpeculativeDecoder& d, const std::vector<int32_t>& prompt, int64_t n,
                                 int64_t k) {
  d.start(prompt);
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < n) {
    const SpeculativeRound r = d.next(k);
    CHECK(r.accepted <= r.drafted);
    CHECK(static_cast<int64_t>(r.tokens.size()) == r.accepted + 1);
    out.insert(out.end(), r.tokens.begin(), r.tokens.end());
  }
  return out;
}

// A draft of another size: one layer instead of two (its memory in layer 0), other weights.
std::string one_layer_toml() {
  std::string toml = model_toml();
  toml.replace(toml.find("n_layers = 2"), 12, "n_layers = 1");
  toml.replace(toml.find("[model.memory]\n"), 15, "[model.memory]\nlayers = [0]\n");
  return toml;
}

}  // namespace

TEST_CASE("rewinding a state gives the state of running only the kept tokens, bitwise",
          "[infer][speculative]") {
  const TestModel tm(model_toml(), "rewind");
  const InferModel m = tm.runtime(ShqQuant::int8);
  const std::vector<int32_t> prefix = random_tokens(6, m.vocab_size(), 1);
  const std::vector<int32_t> step = random_tokens(9, m.vocab_size(), 2);
  DecodeState before = m.new_state();
  m.forward(prefix.data(), 6, before, nullptr, false);
  // Recorded in two forwards (a batched one, then one token), as the draft records its rounds.
  DecodeState after = before;
  MixerInputs record;
  const StreamStep first{&after, step.data(), 8, true, &record};
  std::vector<float> logits(static_cast<size_t>(8 * m.vocab_size()));
  m.forward(std::span(&first, 1), logits.data());
  const StreamStep second{&after, step.data() + 8, 1, false, &record};
  m.forward(std::span(&second, 1), logits.data());
  for (int64_t keep = 0; keep <= 9; ++keep) {
    INFO("keep " << keep);
    DecodeState want = before;
    if (keep > 0) m.forward(step.data(), keep, want, nullptr, false);
    DecodeState got = m.new_state();
    m.rewind(got, before, record, keep);
    CHECK(same_state(got, want));
  }
  DecodeState got = m.new_state();
  CHECK_THROWS_AS(m.rewind(got, before, record, 10), Error);
}

TEST_CASE("greedy speculative decoding gives plain greedy decoding's tokens", "[infer][speculative]") {
  const TestModel target_model(model_toml(), "spec_target");
  const TestModel other_model(model_toml(), "spec_other", 11);
  const TestModel small_model(one_layer_toml(), "spec_small", 5);  // agrees with the target half the time
  const InferModel target = target_model.runtime(ShqQuant::int8);
  const InferModel other = other_model.runtime(ShqQuant::int8);
  const InferModel small = small_model.runtime(ShqQuant::int4);
  REQUIRE(small.config().n_layers == 1);
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  const int64_t n = 40;
  for (uint64_t prompt_seed : {3, 4}) {
    const std::vector<int32_t> prompt =
        random_tokens(prompt_seed == 3 ? 5 : 1, target.vocab_size(), prompt_seed);
    const std::vector<int32_t> want = plain_greedy(target, prompt, n + 8);
    struct Draft {
      const char* name;
      const InferModel* model;
    };
    for (const Draft& draft :
         {Draft{"itself", &target}, Draft{"other seed", &other}, Draft{"one layer", &small}}) {
      for (int64_t k : {1, 2, 4, 8}) {
        INFO("draft " << draft.name << ", K " << k << ", prompt " << prompt.size() << " tokens");
        SpeculativeDecoder d(target, *draft.model, greedy, k);
        const std::vector<int32_t> got = speculative(d, prompt, n, k);
        CHECK(std::vector<int32_t>(got.begin(), got.end()) ==
              std::vector<int32_t>(want.begin(), want.begin() + static_cast<int64_t>(got.size())));
        if (draft.model == &target) {
          CHECK(d.accepted() == d.drafted());
        } else {  // a different model disagrees now and then, so the rejection path is covered
          CHECK(d.accepted() < d.drafted());
        }
        if (draft.model == &small) CHECK(d.accepted() > 0);  // and partial prefixes are kept
      }
    }
    // The draft's state after rewinds is right: each round keeps exactly the
    // drafts on which the draft's own greedy continuation of the text so far
    // agrees with the target's (a stale draft state would propose other tokens).
    for (int64_t k : {2, 4, 8}) {
      INFO("draft state, K " << k);
      SpeculativeDecoder d(target, small, greedy, k);
      d.start(prompt);
      std::vector<int32_t> context = prompt;
      while (static_cast<int64_t>(context.size() - prompt.size()) < n) {
        const std::vector<int32_t> drafted = plain_greedy(small, context, k);
        const std::vector<int32_t> verified = plain_greedy(target, context, k);
        int64_t agree = 0;
        while (agree < k && drafted[agree] == verified[agree]) ++agree;
        const SpeculativeRound r = d.next(k);
        CHECK(r.accepted == agree);
        context.insert(context.end(), r.tokens.begin(), r.tokens.end());
      }
    }
    // Rounds capped to the budget (as generate runs them) stop at exactly n tokens.
    SpeculativeDecoder capped(target, other, greedy, 4);
    capped.start(prompt);
    std::vector<int32_t> got;
    while (static_cast<int64_t>(got.size()) < n) {
      const SpeculativeRound r = capped.next(n - static_cast<int64_t>(got.size()) - 1);
      got.insert(got.end(), r.tokens.begin(), r.tokens.end());
    }
    CHECK(got == std::vector<int32_t>(want.begin(), want.begin() + n));
  }
}

namespace {

using Sequence = std::vector<int32_t>;
using SequenceLaw = std::map<Sequence, double>;

// The exact law of the next `models.size()` tokens after `context` when token
// i is drawn from models[i]'s sampling distribution (the chain rule, every
// branch enumerated).
void sequence_law(const std::vector<const InferModel*>& models, const SamplingOptions& o, Sequence& context,
                  size_t prompt_size, double mass, SequenceLaw& out) {
  const size_t depth = context.size() - prompt_size;
  if (depth == models.size()) {
    out[Sequence(context.begin() + static_cast<int64_t>(prompt_size), context.end())] += mass;
    return;
  }
  const InferModel& m = *models[depth];
  std::vector<float> logits(static_cast<size_t>(m.vocab_size()));
  DecodeState s = m.new_state();
  m.forward(context.data(), static_cast<int64_t>(context.size()), s, logits.data(), false);
  TokenDistribution d;
  Sampler(o).distribution(logits.data(), m.vocab_size(), d);
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    context.push_back(d.tokens[i]);
    sequence_law(models, o, context, prompt_size, mass * d.weights[i] / d.total, out);
    context.pop_back();
  }
}

SequenceLaw sequence_law(const std::vector<const InferModel*>& models, const SamplingOptions& o,
                         const Sequence& prompt) {
  SequenceLaw out;
  Sequence context = prompt;
  sequence_law(models, o, context, prompt.size(), 1.0, out);
  return out;
}

double l1_distance(const SequenceLaw& a, const SequenceLaw& b) {
  double d = 0.0;
  for (const auto& [s, p] : a) d += std::fabs(p - (b.count(s) ? b.at(s) : 0.0));
  for (const auto& [s, p] : b)
    if (!a.count(s)) d += p;
  return d;
}

// An L1 bound that N samples of `law` exceed with probability at most delta.
// E|f_i - p_i| <= sqrt(p_i (1 - p_i) / N) for each cell's frequency f_i
// (Jensen), and one sample moves the L1 distance by at most 2/N, so by
// McDiarmid's inequality P(L1 >= E[L1] + t) <= exp(-N t^2 / 2): t =
// sqrt(2 ln(1/delta) / N). Exact for any N and any number of cells (no
// chi-square approximation, no minimum expected count).
double l1_bound(const SequenceLaw& law, int64_t n, double delta) {
  double expected = 0.0;
  for (const auto& [s, p] : law) expected += std::sqrt(p * (1.0 - p) / static_cast<double>(n));
  return expected + std::sqrt(2.0 * std::log(1.0 / delta) / static_cast<double>(n));
}

}  // namespace

TEST_CASE("with a LoRA adapter on the target, greedy speculative decoding gives the adapted target's tokens",
          "[infer][speculative][lora]") {
  const TestModel target_model(model_toml(), "spec_lora_target");
  const TestModel small_model(one_layer_toml(), "spec_lora_small", 5);
  const InferModel target = target_model.runtime(ShqQuant::int8);
  const InferModel small = small_model.runtime(ShqQuant::int8);
  test::Spec spec;
  spec.q8 = true;
  spec.rank = 4;
  const LoraAdapter adapter = test::load_adapter(target, spec);
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  const std::vector<int32_t> prompt = random_tokens(5, target.vocab_size(), 3);
  const int64_t n = 40;
  const std::vector<int32_t> want = plain_greedy(target, prompt, n + 8, &adapter);
  REQUIRE(want != plain_greedy(target, prompt, n + 8));  // the adapter changes the text
  // The bare target as the draft disagrees with its adapted self now and then.
  for (const InferModel* draft : {&target, &small}) {
    for (int64_t k : {1, 4}) {
      INFO("draft " << (draft == &target ? "the bare target" : "one layer") << ", K " << k);
      SpeculativeDecoder d(target, *draft, greedy, k, &adapter);
      const std::vector<int32_t> got = speculative(d, prompt, n, k);
      CHECK(got == std::vector<int32_t>(want.begin(), want.begin() + static_cast<int64_t>(got.size())));
      CHECK(d.accepted() < d.drafted());
    }
  }
}

TEST_CASE("a rejected draft is replaced by a token from the residual, or from p where rounding leaves none",
          "[infer][speculative]") {
  std::vector<double> scratch;
  // Only token 2 has p > q: every u draws it.
  const std::vector<double> p{0.2, 0.1, 0.5, 0.2}, q{0.3, 0.2, 0.3, 0.2};
  for (double u : {0.0, 0.5, 0.999999}) CHECK(draw_residual(p, q, u, scratch) == 2);
  // p and q agree in every bit but at the rejected token 1 (p a few ulps lower):
  // no residual mass. The draw comes from p (u's share of it), never -1.
  const std::vector<double> p2{0.25427521259045954, 2.379407031e-14, 0.41922895160968765,
                               0.32649583579982883},
      q2{0.25427521259045954, 2.379411570e-14, 0.41922895160968765, 0.32649583579982883};
  CHECK(draw_residual(p2, q2, 0.1, scratch) == 0);
  CHECK(draw_residual(p2, q2, 0.5, scratch) == 2);
  CHECK(draw_residual(p2, q2, 0.9, scratch) == 3);
  // NaN logits make p NaN: token 0, as the sampler gives.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(draw_residual({nan, 0.0, 0.0}, {0.0, 1.0, 0.0}, 0.5, scratch) == 0);
}

TEST_CASE("sampled speculative output has the target's distribution", "[infer][speculative]") {
  // A target and a draft that half agree: the draft has one layer of two,
  // initialised from the same seed. About 35-40% of drafts are kept, and
  // rejected ones include drafts outside the target's top-k. (Two unrelated
  // random models have disjoint top-k sets: nothing would be kept.)
  const TestModel target_model(model_toml(), "dist_target");
  const TestModel draft_model(one_layer_toml(), "dist_draft", 5);
  const InferModel target = target_model.runtime(ShqQuant::int8);
  const InferModel draft = draft_model.runtime(ShqQuant::int8);
  const Sequence prompt = random_tokens(2, target.vocab_size(), 7);
  struct Case {
    const char* name;
    double temperature;
    int64_t top_k;
    double top_p;
  };
  // Three tokens from rounds of K = 2: the first two are drafted (kept, or
  // replaced from the residual), the third is the bonus token or a second round's.
  for (const Case& c : {Case{"T 1, top-k 4", 1.0, 4, 1.0}, Case{"T 0.7, top-k 6, top-p 0.8", 0.7, 6, 0.8}}) {
    INFO(c.name);
    SamplingOptions o;
    o.temperature = c.temperature;
    o.top_k = c.top_k;
    o.top_p = c.top_p;
    const SequenceLaw want = sequence_law({&target, &target, &target}, o, prompt);
    const int64_t N = 12000;
    SequenceLaw seen;
    int64_t drafted = 0, accepted = 0;
    for (int64_t i = 0; i < N; ++i) {
      o.seed = static_cast<uint64_t>(i + 1);
      SpeculativeDecoder d(target, draft, o, 2);
      const Sequence got = speculative(d, prompt, 3, 2);
      seen[Sequence(got.begin(), got.begin() + 3)] += 1.0 / N;
      drafted += d.drafted();
      accepted += d.accepted();
    }
    // A correct implementation's N sequences land within `bound` of the exact
    // law except with probability at most 1e-9 over the seeds (l1_bound), per
    // case: 2e-9 for the test. The seeds are fixed, so the outcome is too.
    const double bound = l1_bound(want, N, 1e-9);
    const double l1 = l1_distance(seen, want);
    INFO("L1 " << l1 << ", bound " << bound << ", acceptance " << accepted << " of " << drafted << ", "
               << want.size() << " sequences");
    CHECK(l1 < bound);
    CHECK(accepted > drafted / 10);
    CHECK(accepted < drafted * 9 / 10);
    // The check has power: rules that get the law wrong land far outside the
    // bound. "Always accept" gives the draft's first two tokens.
    const double always_accept = l1_distance(sequence_law({&draft, &draft, &target}, o, prompt), want);
    INFO("always accept: L1 " << always_accept);
    CHECK(always_accept > 2 * bound);
    // "Resample from p on a rejection" (instead of max(0, p - q)) over-weights
    // the tokens the draft already proposes; exact on the first token.
    const SequenceLaw p1 = sequence_law({&target}, o, prompt), q1 = sequence_law({&draft}, o, prompt);
    double kept_mass = 0.0;
    for (const auto& [s, p] : p1) kept_mass += std::min(p, q1.count(s) ? q1.at(s) : 0.0);
    SequenceLaw resample_p;
    for (const auto& [s, p] : p1)
      resample_p[s] = std::min(p, q1.count(s) ? q1.at(s) : 0.0) + (1 - kept_mass) * p;
    const double wrong_residual = l1_distance(resample_p, p1);
    INFO("resample from p: L1 " << wrong_residual << " on the first token");
    CHECK(wrong_residual > 2 * l1_bound(p1, N, 1e-9));
  }
}

TEST_CASE("a draft with another vocabulary or tokenizer is refused, naming both files",
          "[infer][speculative]") {
  const TestModel target_model(model_toml(), "vocab_target");
  std::string toml = model_toml();
  toml.replace(toml.find("vocab_size = 300"), 16, "vocab_size = 280");
  const TestModel draft_model(toml, "vocab_draft");
  const InferModel target = target_model.runtime(ShqQuant::int8);
  const InferModel draft = draft_model.runtime(ShqQuant::int8);
  CHECK_THROWS_WITH(
      check_draft_compatible(target, "big.shq", draft, "small.shq"),
      Catch::Contains("'small.shq' has vocab_size 280") && Catch::Contains("'big.shq' has 300"));
  CHECK_NOTHROW(check_draft_compatible(target, "big.shq", target, "big.shq"));
  // The same vocabulary size but other tokenizers.
  auto with_tokenizer = [&](const std::string& text) {
    ExportOptions e;
    e.quant = ShqQuant::int8;
    e.tokenizer_text = Tokenizer::train(text, 270).to_text();
    const std::vector<uint8_t> image = export_model_image(target_model.checkpoint, e);
    return InferModel(ShqFile::from_bytes(image.data(), image.size(), "with tokenizer"));
  };
  const InferModel cat = with_tokenizer("the cat sat on the mat, the cat sat on the hat");
  const InferModel dog = with_tokenizer("a dog ran in the fog, a dog ran over a log");
  CHECK_THROWS_WITH(
      check_draft_compatible(cat, "big.shq", dog, "small.shq"),
      Catch::Contains("'small.shq' embeds a different tokenizer") && Catch::Contains("'big.shq'"));
  CHECK_NOTHROW(check_draft_compatible(cat, "big.shq", target, "small.shq"));  // one without: ids are ids
  SamplingOptions o;
  CHECK_THROWS_WITH(SpeculativeDecoder(target, target, o, 0), Catch::Contains("--draft-tokens 0"));
  CHECK_THROWS_WITH(SpeculativeDecoder(target, target, o, kMaxDraftTokens + 1),
                    Catch::Contains("--draft-tokens"));
}

}  // namespace shamn
