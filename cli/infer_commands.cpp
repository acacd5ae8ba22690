// `shamn export`, `shamn generate`, `shamn eval`, `shamn bench`: from a trained
// checkpoint to a quantised model file, and what a user does with one.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/checkpoint_decoder.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/json_text.h"
#include "cli/model_source.h"
#include "cli/profile_flags.h"
#include "core/atomic_file.h"
#include "core/buffer.h"
#include "core/checksum.h"
#include "core/config_table.h"
#include "core/hdf5_file.h"
#include "core/kernel_level.h"
#include "core/lora_scale.h"
#include "core/parallel.h"
#include "core/process_memory.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/timing.h"
#include "data/token_file.h"
#include "infer/export_model.h"
#include "infer/sampler.h"
#include "infer/speculative.h"
#include "train/adapter_checkpoint.h"

namespace shamn::cli {

namespace {

// ---- export ----

struct ExportArgs {
  std::string checkpoint, out, quant = "int8", tokenizer, base;
  bool no_tokenizer = false, merge = false;
};

// The tokenizer to embed: --tokenizer, else the checkpoint config's data.tokenizer.
std::string tokenizer_for_export(const ExportArgs& a, int64_t vocab) {
  if (a.no_tokenizer) return "";
  std::string path = a.tokenizer;
  if (path.empty()) {
    const Hdf5Reader reader(a.checkpoint);
    const ConfigTable config =
        ConfigTable::parse(reader.string_attribute("config"), a.checkpoint + " (attribute config)");
    path = config.get_string("data.tokenizer").value_or("");
    SHAMN_INPUT_CHECK(!path.empty(), "'", a.checkpoint,
                      "' names no tokenizer (data.tokenizer): pass --tokenizer PATH, or --no-tokenizer "
                      "to export a model that takes token ids only");
    SHAMN_INPUT_CHECK(std::filesystem::exists(path), "the checkpoint's tokenizer '", path,
                      "' (data.tokenizer) does not exist here: pass --tokenizer PATH");
  }
  const Tokenizer tok = Tokenizer::load(path);  // validates the file
  SHAMN_INPUT_CHECK(tok.vocab_size() <= vocab, "tokenizer '", path, "' has ", tok.vocab_size(),
                    " tokens but the model's vocab_size is ", vocab);
  return tok.to_text();
}

// The identity of an adapter checkpoint, after checking that --base is the
// checkpoint it was trained on.
AdapterIdentity checked_adapter(const ExportArgs& a, const Hdf5Reader& reader) {
  SHAMN_INPUT_CHECK(
      !a.base.empty(), "'", a.checkpoint,
      "' is a LoRA adapter checkpoint: pass the checkpoint it was trained on with --base BASE.h5");
  const AdapterIdentity id = read_adapter_identity(reader);
  SHAMN_INPUT_CHECK(checkpoint_source_id(a.base) == id.base_crc32, "the LoRA adapters in '", a.checkpoint,
                    "' were trained on another base model than --base '", a.base,
                    "' (the adapter records base '", id.base_file, "')");
  return id;
}

// An adapter checkpoint (a LoRA run's) to an adapter file.
void export_adapter(const ExportArgs& a, const Hdf5Reader& reader) {
  const AdapterIdentity id = checked_adapter(a, reader);
  AdapterExport o;
  o.rank = id.lora.rank;
  o.alpha = id.lora.alpha;
  o.rslora = id.lora.rslora;
  o.base_id = id.base_crc32;
  o.quant = shq_quant_from_string(a.quant);
  const std::vector<uint8_t> image = export_adapter_image(a.checkpoint, o);
  const ShqFile check =
      ShqFile::from_bytes(image.data(), image.size(), a.out + " (exported)", "adapter file");
  AtomicFile file(a.out, "shq");
  file.write(image.data(), image.size());
  file.commit();
  std::printf("wrote %s (LoRA adapter, %s, rank %" PRId64
              ", alpha %g%s, %zu matrices, %.2f MiB) for base %s\n",
              a.out.c_str(), a.quant.c_str(), o.rank, o.alpha, lora_scale_note(o.rslora),
              check.tensors().size() / 2, check.file_bytes() / 1048576.0, a.base.c_str());
}

// What a model file holds, by dtype.
void print_export_summary(const ExportArgs& a, const Stopwatch& t0) {
  const InferModel model(ShqFile::open(a.out));
  constexpr int kDTypes = static_cast<int>(ShqDType::q4_0x16) + 1;
  uint64_t by_dtype[kDTypes] = {}, count[kDTypes] = {};
  for (const ShqTensor& t : model.file().tensors()) {
    by_dtype[static_cast<int>(t.dtype)] += t.bytes;
    ++count[static_cast<int>(t.dtype)];
  }
  std::printf("wrote %s (%s, step %" PRIu64 ", %.2f MiB, %.1f s)\n", a.out.c_str(), a.quant.c_str(),
              model.file().header().step, model.file().file_bytes() / 1048576.0, t0.seconds());
  for (int i = 0; i < kDTypes; ++i) {
    const auto d = static_cast<ShqDType>(i);
    if (count[i] > 0)
      std::printf("  %-7s %5" PRIu64 " tensors %10.2f MiB\n", shq_dtype_name(d), count[i],
                  by_dtype[i] / 1048576.0);
  }
  std::printf("  tokenizer: %s\n",
              model.tokenizer() ? std::to_string(model.tokenizer()->vocab_size()).c_str() : "none");
}

// --merge: the base with the adapter folded into its dense matrices, as one model file.
void export_merged(const ExportArgs& a, const Hdf5Reader& reader) {
  const Stopwatch t0;
  const AdapterIdentity id = checked_adapter(a, reader);
  ExportOptions options;
  options.quant = shq_quant_from_string(a.quant);
  options.merge = MergeAdapter{a.checkpoint, id.lora.rank, id.lora.alpha, id.lora.rslora};
  // The fine-tuning run's tokenizer (its data.tokenizer), as for any export.
  options.tokenizer_text = tokenizer_for_export(
      a, ModelConfig::from_toml(reader.string_attribute("config"), a.checkpoint + " (attribute config)")
             .vocab_size);
  export_model(a.base, options, a.out);
  std::printf("merged the LoRA adapters of %s (rank %" PRId64 ", alpha %g%s) into base %s\n",
              a.checkpoint.c_str(), id.lora.rank, id.lora.alpha, lora_scale_note(id.lora.rslora),
              a.base.c_str());
  print_export_summary(a, t0);
}

void run_export(const ExportArgs& a) {
  {
    const Hdf5Reader reader(a.checkpoint);
    if (is_adapter_checkpoint(reader)) return a.merge ? export_merged(a, reader) : export_adapter(a, reader);
  }
  SHAMN_INPUT_CHECK(!a.merge, "--merge folds a LoRA adapter checkpoint into its --base; '", a.checkpoint,
                    "' is a whole model");
  SHAMN_INPUT_CHECK(a.base.empty(), "--base is for LoRA adapter checkpoints; '", a.checkpoint,
                    "' is a whole model");
  const Stopwatch t0;
  ExportOptions options;
  options.quant = shq_quant_from_string(a.quant);
  {
    const Hdf5Reader reader(a.checkpoint);
    SHAMN_INPUT_CHECK(reader.has_attribute("config"), "'", a.checkpoint,
                      "' is not a shamn checkpoint (no config)");
    const ModelConfig config = ModelConfig::from_toml(reader.string_attribute("config"), a.checkpoint);
    options.tokenizer_text = tokenizer_for_export(a, config.vocab_size);
  }
  export_model(a.checkpoint, options, a.out);
  print_export_summary(a, t0);
}

// ---- generate ----

SamplingOptions greedy_sampling() {
  SamplingOptions s;
  s.temperature = 0;
  return s;
}

// "ID=BIAS" of --logit-bias: a token id and any number strtod reads (a bias
// too small for a float is 0, not an error), within [-100, 100] as a double,
// before it is narrowed.
std::pair<int32_t, float> logit_bias_entry(const std::string& spec) {
  const size_t eq = spec.find('=');
  int32_t id = -1;
  if (eq != std::string::npos) {
    const auto [id_end, id_error] = std::from_chars(spec.data(), spec.data() + eq, id);
    const std::string bias_text = spec.substr(eq + 1);
    char* bias_end = nullptr;
    const double bias = std::strtod(bias_text.c_str(), &bias_end);
    if (id_error == std::errc() && id_end == spec.data() + eq && id >= 0 && !bias_text.empty() &&
        !std::isspace(static_cast<unsigned char>(bias_text[0])) &&
        bias_end == bias_text.c_str() + bias_text.size()) {
      if (!(std::abs(bias) <= kLogitBiasLimit))
        throw CLI::ValidationError("--logit-bias", "'" + spec + "': the bias must be in [-100, 100]");
      return {id, static_cast<float>(bias)};
    }
  }
  throw CLI::ValidationError("--logit-bias",
                             "'" + spec + "' is not ID=BIAS (a token id and a number: 42=-100)");
}

struct GenerateArgs {
  std::string model, prompt, kernel, draft, adapter, tokenizer;
  int64_t max_tokens = 128, draft_tokens = 4;
  SamplingOptions sampling;
};

// Writes a token's bytes to stdout at once.
void print_token(const Tokenizer& tok, int32_t id) {
  const std::string& piece = tok.model_token_bytes(id);
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
}

void print_stats(size_t prompt_tokens, double prefill_s, int64_t produced, double decode_s,
                 const std::string& extra) {
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(
      stderr, "[%zu prompt tokens: %.1f tok/s prefill; %" PRId64 " tokens: %.1f tok/s decode;%s kernel %s]\n",
      prompt_tokens, prompt_tokens / prefill_s, produced, produced / std::max(decode_s, 1e-9), extra.c_str(),
      kernel_level_name(kernel_level()));
}

// The target's text, drafted by a second model and verified in batches (infer/speculative.h).
void generate_speculative(const GenerateArgs& a, const InferModel& model,
                          const std::vector<int32_t>& prompt) {
  const InferModel draft(ShqFile::open(a.draft));
  check_draft_compatible(model, a.model, draft, a.draft);
  std::optional<LoraAdapter> adapter;
  if (!a.adapter.empty()) adapter.emplace(ShqFile::open(a.adapter, "adapter file"), model);
  SpeculativeDecoder decoder(model, draft, a.sampling, a.draft_tokens, adapter ? &*adapter : nullptr);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  const Stopwatch t0;
  decoder.start(prompt);
  const double prefill_s = t0.seconds();
  const Stopwatch t1;
  int64_t produced = 0;
  while (produced < a.max_tokens) {
    // At most as many drafts as leave room for the target's own token.
    const SpeculativeRound round = decoder.next(a.max_tokens - produced - 1);
    for (int32_t id : round.tokens) print_token(*model.tokenizer(), id);
    produced += static_cast<int64_t>(round.tokens.size());
  }
  const double decode_s = t1.seconds();
  char extra[128];
  std::snprintf(extra, sizeof extra, " draft acceptance %.3f (%" PRId64 " of %" PRId64 ", K %" PRId64 ");",
                decoder.drafted() > 0 ? static_cast<double>(decoder.accepted()) / decoder.drafted() : 0.0,
                decoder.accepted(), decoder.drafted(), a.draft_tokens);
  print_stats(prompt.size(), prefill_s, produced, decode_s, extra);
}

// Echoes the prompt, runs it through `feed(tokens, n, logits)`, then samples,
// prints and feeds back up to max_tokens tokens, and prints the speeds: the
// loop `generate` runs for a model file and for a checkpoint alike.
template <class Feed>
void sample_text(const GenerateArgs& a, const Tokenizer& tok, const std::vector<int32_t>& prompt, int64_t V,
                 Feed&& feed, const std::string& extra) {
  Buffer<float> logits(V);  // 64-byte aligned: the head's stores split no cache line
  a.sampling.check_vocabulary(V);
  Sampler sampler(a.sampling);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  const Stopwatch t0;
  feed(prompt.data(), static_cast<int64_t>(prompt.size()), logits.data());
  const double prefill_s = t0.seconds();
  const Stopwatch t1;
  int64_t produced = 0;
  for (; produced < a.max_tokens; ++produced) {
    const int32_t next = sampler.sample(logits.data(), V);
    print_token(tok, next);
    if (produced + 1 < a.max_tokens) feed(&next, 1, logits.data());
  }
  print_stats(prompt.size(), prefill_s, produced, t1.seconds(), extra);
}

// A checkpoint's text: the autograd model rerun over the receptive field at
// each step (cli/checkpoint_decoder.h says why), sampled as the runtime samples.
void generate_from_checkpoint(const GenerateArgs& a) {
  SHAMN_INPUT_CHECK(a.draft.empty() && a.adapter.empty(),
                    "--draft and --adapter run with a model file (.shq), ", "not the checkpoint '", a.model,
                    "': export it first (shamn export)");
  const ModelSource model = open_model_source(a.model);
  const Tokenizer tok = checkpoint_tokenizer(a.model, a.tokenizer, model.config.vocab_size);
  const std::vector<uint32_t> ids = tok.encode(a.prompt);
  SHAMN_INPUT_CHECK(!ids.empty(), "--prompt is empty: the model needs at least one token to continue");
  const std::vector<int32_t> prompt(ids.begin(), ids.end());
  ReceptiveFieldDecoder decoder(model);
  sample_text(
      a, tok, prompt, model.config.vocab_size,
      [&](const int32_t* t, int64_t n, float* logits) { decoder.feed(t, n, logits); },
      " checkpoint, autograd forward over " + std::to_string(decoder.receptive_field()) +
          " tokens per step;");
}

void run_generate(const GenerateArgs& a) {
  apply_kernel_flag(a.kernel);
  a.sampling.validate();
  SHAMN_INPUT_CHECK(a.max_tokens >= 0, "--max-tokens must be >= 0");
  SHAMN_INPUT_CHECK(a.draft_tokens >= 1 && a.draft_tokens <= kMaxDraftTokens, "--draft-tokens ",
                    a.draft_tokens, " must be in [1, ", kMaxDraftTokens, "]");
  if (!is_shq_file(a.model)) return generate_from_checkpoint(a);
  SHAMN_INPUT_CHECK(a.tokenizer.empty(), "--tokenizer is for checkpoints: the model file '", a.model,
                    "' carries its own");
  const InferModel model(ShqFile::open(a.model));
  SHAMN_INPUT_CHECK(model.tokenizer().has_value(), "model file '", a.model,
                    "' has no tokenizer: re-export it with --tokenizer PATH");
  const Tokenizer& tok = *model.tokenizer();
  const std::vector<uint32_t> ids = tok.encode(a.prompt);
  SHAMN_INPUT_CHECK(!ids.empty(), "--prompt is empty: the model needs at least one token to continue");
  std::vector<int32_t> prompt(ids.begin(), ids.end());
  if (!a.draft.empty()) return generate_speculative(a, model, prompt);
  std::optional<LoraAdapter> adapter;
  if (!a.adapter.empty()) adapter.emplace(ShqFile::open(a.adapter, "adapter file"), model);
  const LoraAdapter* lora = adapter ? &*adapter : nullptr;
  DecodeState state = model.new_state();
  sample_text(
      a, tok, prompt, model.vocab_size(),
      [&](const int32_t* t, int64_t n, float* logits) { model.forward(t, n, state, logits, false, lora); },
      "");
}

// ---- eval ----

struct EvalArgs {
  std::string model, data, reference, format = "llmc", kernel, adapter;
  int64_t seq_len = 512, max_windows = 0;
  ProfileFlags profile;
};

constexpr const char* kEvalTrace = "eval-profile.json";
constexpr const char* kBenchTrace = "bench-profile.json";

void run_eval(const EvalArgs& a) {
  apply_kernel_flag(a.kernel);
  const ModelSource model = open_model_source(a.model, a.adapter);
  std::unique_ptr<ModelSource> ref;
  if (!a.reference.empty()) {
    ref = std::make_unique<ModelSource>(open_model_source(a.reference));
    SHAMN_INPUT_CHECK(ref->config.to_toml() == model.config.to_toml(), "--reference '", a.reference,
                      "' is a different model from '", a.model, "' (the [model] configs differ)");
  }
  const TokenFile data(a.data, a.format == "u16" ? TokenFormat::u16 : TokenFormat::llmc);
  const Stopwatch t0;
  begin_profile(a.profile, !model.runtime);
  EvalResult r;
  if (ref) {
    const LogitFunction rf = ref->logit_function();
    r = evaluate(data, model.config.vocab_size, a.seq_len, a.max_windows, model.logit_function(), &rf);
  } else {
    r = evaluate(data, model.config.vocab_size, a.seq_len, a.max_windows, model.loss_function(),
                 model.concurrent_windows());
  }
  // stdout stays one JSON object: the table goes to stderr.
  end_profile(a.profile, kEvalTrace, stderr);
  nlohmann::ordered_json out = {{"model", a.model},     {"kind", model.kind()},        {"data", a.data},
                                {"seq_len", a.seq_len}, {"windows", r.windows},        {"tokens", r.tokens},
                                {"loss", r.loss},       {"perplexity", r.perplexity()}};
  if (!a.adapter.empty()) out["adapter"] = a.adapter;
  if (ref) {
    out["reference"] = a.reference;
    out["reference_loss"] = r.reference_loss;
    out["reference_perplexity"] = std::exp(r.reference_loss);
    out["perplexity_ratio"] = std::exp(r.loss - r.reference_loss);
    out["mean_kl"] = r.mean_kl;
    out["top1_agreement"] = r.top1_agreement;
  }
  out["seconds"] = t0.seconds();
  std::printf("%s\n", json_text(out).c_str());
}

// ---- bench ----

struct BenchArgs {
  std::string model, kernel;
  std::vector<std::string> adapters;  // stream b runs adapters[b % count]
  int64_t prompt_tokens = 128, decode_tokens = 128, repeats = 5, warmup = 1, streams = 1;
  uint64_t seed = 1;
  // Greedy unless --temperature > 0 (the figures then include each draw, as
  // serve's default requests do); stream b's sampler is seeded seed + b.
  SamplingOptions sampling = greedy_sampling();
  // Decode feeds pre-drawn random tokens instead of the sampled ones (the
  // sampler still runs): two models, or a model with and without an adapter,
  // then decode the same tokens, so their speeds compare the same work (the
  // experts a token routes to, and so the load on each, follow the text).
  bool forced_decode = false;
  bool json = false;
  ProfileFlags profile;
};

void run_bench(const BenchArgs& a) {
  apply_kernel_flag(a.kernel);
  SHAMN_INPUT_CHECK(a.prompt_tokens >= 1 && a.decode_tokens >= 1 && a.repeats >= 1 && a.streams >= 1,
                    "--prompt-tokens, --decode-tokens, --repeats and --streams must be >= 1");
  // Each bound keeps the products below (the tokens drawn up front) far from overflow.
  constexpr int64_t kMaxEach = int64_t{1} << 24, kMaxTokens = int64_t{1} << 30;
  SHAMN_INPUT_CHECK(a.prompt_tokens <= kMaxEach && a.decode_tokens <= kMaxEach && a.streams <= kMaxEach,
                    "--prompt-tokens, --decode-tokens and --streams must be <= ", kMaxEach);
  SHAMN_INPUT_CHECK(a.streams * std::max(a.prompt_tokens, a.decode_tokens) <= kMaxTokens, "--streams ",
                    a.streams, " x --prompt-tokens ", a.prompt_tokens, " or --decode-tokens ",
                    a.decode_tokens, " is more than ", kMaxTokens, " tokens");
  SHAMN_INPUT_CHECK(a.warmup >= 0, "--warmup must be >= 0");
  a.sampling.validate();
  const ModelSource model = open_model_source(a.model);
  SHAMN_INPUT_CHECK(a.adapters.empty() || model.runtime,
                    "--adapter runs with a model file (.shq), not the "
                    "checkpoint '",
                    a.model, "': export the base first");
  std::vector<LoraAdapter> adapters;
  for (const std::string& path : a.adapters)
    adapters.emplace_back(ShqFile::open(path, "adapter file"), *model.runtime);
  // Stream b's adapter: round robin over --adapter, so one batch mixes them.
  const auto adapter_of = [&adapters](int64_t b) {
    return adapters.empty() ? nullptr : &adapters[static_cast<size_t>(b) % adapters.size()];
  };
  SHAMN_INPUT_CHECK(a.streams == 1 || model.runtime,
                    "--streams needs a model file (.shq): the autograd "
                    "forward decodes one sequence");
  const int64_t V = model.config.vocab_size, B = a.streams;
  Rng rng(a.seed);
  // One random prompt per stream.
  std::vector<int32_t> prompt(static_cast<size_t>(B * a.prompt_tokens));
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  // --forced-decode: the token stream b feeds at decode step i is forced[i * B + b].
  std::vector<int32_t> forced(static_cast<size_t>(a.forced_decode ? a.decode_tokens * B : 0));
  for (int32_t& t : forced) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  // CRC-32 of the tokens the decode steps fed, step by step (every run feeds
  // the same): equal CRCs say two benches decoded the same text.
  uint32_t decoded_crc = 0;
  // Each run draws the same tokens: its streams' samplers start afresh.
  const auto new_samplers = [&a, B] {
    std::vector<Sampler> samplers;
    for (int64_t b = 0; b < B; ++b) {
      SamplingOptions o = a.sampling;
      o.seed = a.seed + static_cast<uint64_t>(b);
      samplers.emplace_back(o);
    }
    return samplers;
  };

  // The first runs are not timed (--warmup): a process's first prefill pays for
  // the thread pool's start, its buffers' first page faults and cold caches (on
  // a 2-core Zen 5 VM, 1.3x slower than the next on 1 thread, 2x on 2).
  std::vector<double> prefill, decode, step_ms;
  const int64_t runs = a.warmup + a.repeats;
  const auto timed = [&a, &model](int64_t r) {
    if (r == a.warmup) begin_profile(a.profile, !model.runtime);
    if (r >= a.warmup) profile_begin_step(r - a.warmup + 1);
    return r >= a.warmup;
  };
  if (model.runtime) {
    const InferModel& m = *model.runtime;
    // 64-byte aligned: unaligned, the head's 64-byte stores split cache lines and
    // 16 streams decode ~7% slower, by where the heap happened to put them.
    Buffer<float> logits(B * V);
    std::vector<int32_t> next(static_cast<size_t>(B));
    for (int64_t r = 0; r < runs; ++r) {
      const bool keep = timed(r);
      std::vector<Sampler> samplers = new_samplers();
      std::vector<DecodeState> states;
      for (int64_t b = 0; b < B; ++b) states.push_back(m.new_state());
      Stopwatch t0;
      {
        const ProfileScope scope("prefill", ProfileCategory::step);
        if (B == 1) {
          m.forward(prompt.data(), a.prompt_tokens, states[0], logits.data(), false, adapter_of(0));
        } else {  // every stream's prompt in one pass
          std::vector<StreamStep> steps;
          for (int64_t b = 0; b < B; ++b) {
            steps.push_back({&states[b], prompt.data() + b * a.prompt_tokens, a.prompt_tokens, false});
            steps.back().adapter = adapter_of(b);
          }
          m.forward(steps, logits.data());
        }
      }
      if (keep) prefill.push_back(B * a.prompt_tokens / t0.seconds());
      t0.restart();
      std::vector<StreamStep> steps;
      for (int64_t b = 0; b < B; ++b) {
        steps.push_back({&states[b], &next[b], 1, false});
        steps.back().adapter = adapter_of(b);
      }
      decoded_crc = 0;
      for (int64_t i = 0; i < a.decode_tokens; ++i) {
        const ProfileScope scope("decode_token", ProfileCategory::step);
        // The streams' next tokens side by side, as `serve` draws them.
        parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t b = lo; b < hi; ++b) {
            next[b] = samplers[b].sample(logits.data() + b * V, V);
            if (!forced.empty()) next[b] = forced[i * B + b];
          }
        });
        decoded_crc = crc32_update(decoded_crc, next.data(), next.size() * sizeof(int32_t));
        m.forward(steps, logits.data());
      }
      const double s = t0.seconds();
      if (!keep) continue;
      decode.push_back(B * a.decode_tokens / s);
      step_ms.push_back(1e3 * s / a.decode_tokens);
    }
  } else {
    // The autograd model has no decode state: each new token reruns the model
    // over the receptive field, the last L*(K-1)+1 tokens (the convolutions are
    // the only token mixing), which gives the same logits as the full context.
    const int64_t R = model.config.n_layers * (model.config.mixer_kernel - 1) + 1;
    const LogitFunction f = model.logit_function();
    for (int64_t r = 0; r < runs; ++r) {
      const bool keep = timed(r);
      Sampler sampler = std::move(new_samplers()[0]);
      std::vector<float> logits(static_cast<size_t>(a.prompt_tokens * V));
      Stopwatch t0;
      {
        const ProfileScope scope("prefill", ProfileCategory::step);
        f(prompt.data(), a.prompt_tokens, logits.data());
      }
      const double prefill_s = t0.seconds();
      std::vector<int32_t> context = prompt;
      int32_t next = sampler.sample(logits.data() + (a.prompt_tokens - 1) * V, V);
      logits.resize(static_cast<size_t>(R * V));
      t0.restart();
      decoded_crc = 0;
      for (int64_t i = 0; i < a.decode_tokens; ++i) {
        const ProfileScope scope("decode_token", ProfileCategory::step);
        if (!forced.empty()) next = forced[i];
        decoded_crc = crc32_update(decoded_crc, &next, sizeof(next));
        context.push_back(next);
        const int64_t w = std::min<int64_t>(R, static_cast<int64_t>(context.size()));
        f(context.data() + context.size() - w, w, logits.data());
        next = sampler.sample(logits.data() + (w - 1) * V, V);
      }
      if (!keep) continue;
      prefill.push_back(a.prompt_tokens / prefill_s);
      decode.push_back(a.decode_tokens / t0.seconds());
      step_ms.push_back(1e3 / decode.back());
    }
  }
  stop_profiling();  // the report below is not part of the profile
  const double pre = median(prefill), dec = median(decode), latency = median(step_ms);
  const uint64_t file_bytes = std::filesystem::file_size(a.model);
  const uint64_t per_token = model.runtime ? model.runtime->weight_bytes_per_token() : 0;
  const double rss_mib = peak_rss_bytes() / 1048576.0;
  const char* kernel = model.runtime ? kernel_level_name(kernel_level()) : "autograd";
  if (a.json) {
    nlohmann::ordered_json adapter_json = nlohmann::ordered_json::array();
    for (const LoraAdapter& ad : adapters)
      adapter_json.push_back(
          {{"path", ad.path()}, {"rank", ad.rank()}, {"bytes_per_token", ad.bytes_per_token()}});
    const nlohmann::ordered_json out = {{"model", a.model},
                                        {"kind", model.kind()},
                                        {"kernel", kernel},
                                        {"threads", num_threads()},
                                        {"prompt_tokens", a.prompt_tokens},
                                        {"decode_tokens", a.decode_tokens},
                                        {"repeats", a.repeats},
                                        {"warmup", a.warmup},
                                        {"streams", B},
                                        {"temperature", a.sampling.temperature},
                                        {"top_k", a.sampling.top_k},
                                        {"top_p", a.sampling.top_p},
                                        {"decode_input", a.forced_decode ? "forced" : "sampled"},
                                        {"decoded_crc32", decoded_crc},
                                        {"prefill_tok_s", pre},
                                        {"decode_tok_s", dec},
                                        {"decode_step_ms", latency},
                                        {"weight_bytes_per_token", per_token},
                                        {"adapters", adapter_json},
                                        {"file_bytes", file_bytes},
                                        {"peak_rss_mib", rss_mib}};
    std::printf("%s\n", json_text(out).c_str());
    end_profile(a.profile, kBenchTrace, stderr);  // stdout stays one JSON line
    return;
  }
  std::printf("model      %s (%s, kernel %s, %d threads)\n", a.model.c_str(), model.kind().c_str(), kernel,
              num_threads());
  std::printf("prefill    %.1f tok/s (median of %" PRId64 ", %" PRId64 "-token prompt)\n", pre, a.repeats,
              a.prompt_tokens);
  std::printf("decode     %.1f tok/s (median of %" PRId64 ", %" PRId64 " tokens, %" PRId64
              " streams; %.3f ms per step, each stream's per-token latency)\n",
              dec, a.repeats, a.decode_tokens, B, latency);
  if (a.sampling.temperature > 0)
    std::printf("sampling   temperature %g, top-k %" PRId64 ", top-p %g (each token drawn)\n",
                a.sampling.temperature, a.sampling.top_k, a.sampling.top_p);
  std::printf("decoded    %s tokens, CRC-32 %08" PRIx32 "\n", a.forced_decode ? "forced (random)" : "sampled",
              decoded_crc);
  if (per_token > 0) std::printf("weights    %.3f MiB read per decoded token\n", per_token / 1048576.0);
  for (const LoraAdapter& ad : adapters)
    std::printf("adapter    %s: rank %" PRId64 ", %.3f MiB more read per decoded token of its streams\n",
                ad.path().c_str(), ad.rank(), ad.bytes_per_token() / 1048576.0);
  std::printf("file       %.2f MiB\n", file_bytes / 1048576.0);
  std::printf("peak RSS   %.1f MiB\n", rss_mib);
  end_profile(a.profile, kBenchTrace, stdout);
}

}  // namespace

void register_infer_commands(CLI::App& app) {
  auto ex = std::make_shared<ExportArgs>();
  CLI::App* ec = app.add_subcommand("export", "convert a checkpoint into a quantised model file (.shq)");
  ec->add_option("checkpoint", ex->checkpoint, "training or model-only checkpoint (.h5)")
      ->required()
      ->check(CLI::ExistingFile);
  ec->add_option("--quant", ex->quant, "f32, int8 or int4")->capture_default_str();
  ec->add_option("-o,--out", ex->out, "model file to write (.shq)")->required();
  CLI::Option* tokenizer = ec->add_option("--tokenizer", ex->tokenizer,
                                          "tokenizer to embed (default: the checkpoint's data.tokenizer)");
  ec->add_flag("--no-tokenizer", ex->no_tokenizer, "embed no tokenizer (the model then takes token ids only)")
      ->excludes(tokenizer);
  ec->add_option("--base", ex->base,
                 "for a LoRA adapter checkpoint: the checkpoint it was trained on (writes an adapter file "
                 "for --adapter, --quant f32 or int8; with --merge, a model file at any --quant)")
      ->check(CLI::ExistingFile);
  ec->add_flag(
      "--merge", ex->merge,
      "with --base: fold the adapter into the base's dense matrices and write one model file (runs at "
      "the base's speed; adapters on block-sparse matrices are refused)");
  ec->callback([ex] { run_export(*ex); });

  auto gen = std::make_shared<GenerateArgs>();
  CLI::App* gc = app.add_subcommand("generate", "continue a prompt, streaming the text as it is produced");
  gc->add_option("model", gen->model,
                 "model file (.shq) or checkpoint (.h5: the autograd forward, rerun over the receptive field "
                 "at each token; slower)")
      ->required()
      ->check(CLI::ExistingFile);
  gc->add_option("--tokenizer", gen->tokenizer,
                 "for a checkpoint: the tokenizer (default: its config's data.tokenizer); a model file "
                 "carries its own");
  gc->add_option("-p,--prompt", gen->prompt, "text to continue")->required();
  gc->add_option("-n,--max-tokens", gen->max_tokens, "tokens to generate")->capture_default_str();
  gc->add_option("--temperature", gen->sampling.temperature, "0 = greedy")->capture_default_str();
  gc->add_option("--top-k", gen->sampling.top_k, "keep the k likeliest tokens (0 = all)")
      ->capture_default_str();
  gc->add_option("--top-p", gen->sampling.top_p, "nucleus: keep the smallest set with this mass")
      ->capture_default_str();
  gc->add_option("--seed", gen->sampling.seed, "sampling seed: the same seed gives the same text")
      ->capture_default_str()
      ->check(seed_number());
  gc->add_option("--frequency-penalty", gen->sampling.frequency_penalty,
                 "less this times a token's count in the generated text, from its logit (OpenAI's; [-2, 2])")
      ->capture_default_str();
  gc->add_option("--presence-penalty", gen->sampling.presence_penalty,
                 "less this from the logit of a token the text has (OpenAI's; [-2, 2])")
      ->capture_default_str();
  gc->add_option_function<std::vector<std::string>>(
        "--logit-bias",
        [gen](const std::vector<std::string>& specs) {
          for (const std::string& spec : specs) gen->sampling.logit_bias.push_back(logit_bias_entry(spec));
        },
        "ID=BIAS: add BIAS ([-100, 100]; -100 bans it) to token ID's logit (repeat for several)")
      ->type_name("ID=BIAS");
  gc->add_option("--kernel", gen->kernel, "scalar, avx2 or avx512 (default: the CPU's best)");
  gc->add_option("--draft", gen->draft,
                 "speculative decoding: a smaller model file (.shq) with the same vocabulary drafts "
                 "tokens that the model verifies in batches; the same output distribution")
      ->check(CLI::ExistingFile);
  gc->add_option("--draft-tokens", gen->draft_tokens, "with --draft: tokens drafted per verification (K)")
      ->capture_default_str();
  gc->add_option("--adapter", gen->adapter,
                 "a LoRA adapter file (shamn export ADAPTER.h5 --base ...) to run with")
      ->check(CLI::ExistingFile);
  gc->callback([gen] { run_generate(*gen); });

  auto ev = std::make_shared<EvalArgs>();
  CLI::App* vc =
      app.add_subcommand("eval", "loss and perplexity of a model file or checkpoint on a token file (JSON)");
  vc->add_option("model", ev->model,
                 "model file (.shq) or checkpoint (.h5); not a LoRA adapter (see --adapter)")
      ->required()
      ->check(CLI::ExistingFile);
  vc->add_option("--data", ev->data, "token file (llm.c format)")->required()->check(CLI::ExistingFile);
  vc->add_option("--seq-len", ev->seq_len, "window length T")->capture_default_str()->check(whole_number(1));
  vc->add_option("--max-windows", ev->max_windows, "at most this many windows (0 = all)")
      ->check(whole_number(0))
      ->capture_default_str();
  vc->add_option("--reference", ev->reference,
                 "also report KL divergence and top-1 agreement against this model (.shq or .h5)")
      ->check(CLI::ExistingFile);
  vc->add_option("--format", ev->format, "llmc or u16")
      ->capture_default_str()
      ->check(CLI::IsMember({"llmc", "u16"}));
  vc->add_option("--kernel", ev->kernel, "scalar, avx2 or avx512 (default: the CPU's best)");
  vc->add_option("--adapter", ev->adapter, "a LoRA adapter file to run the model (.shq) with")
      ->check(CLI::ExistingFile);
  add_profile_flags(vc, ev->profile, kEvalTrace);
  vc->callback([ev] { run_eval(*ev); });

  auto be = std::make_shared<BenchArgs>();
  CLI::App* bc =
      app.add_subcommand("bench", "prefill and decode speed, weight bytes per token, size and memory");
  bc->add_option(
        "model", be->model,
        "model file (.shq) or checkpoint (.h5, the autograd forward); not a LoRA adapter (see --adapter)")
      ->required()
      ->check(CLI::ExistingFile);
  bc->add_option("--prompt-tokens", be->prompt_tokens, "prefill length")->capture_default_str();
  bc->add_option("--decode-tokens", be->decode_tokens, "tokens decoded per repeat")->capture_default_str();
  bc->add_option("--repeats", be->repeats, "repeats (the median is reported)")->capture_default_str();
  bc->add_option("--warmup", be->warmup, "untimed runs before the repeats (prefill and decode, unprofiled)")
      ->capture_default_str();
  bc->add_option("--seed", be->seed, "seed of the random prompts (and of stream b's sampler: seed + b)")
      ->capture_default_str()
      ->check(seed_number());
  bc->add_option("--temperature", be->sampling.temperature,
                 "0 = greedy (the default); above, every decoded token is drawn with --top-k and --top-p, "
                 "as serve's requests are")
      ->capture_default_str();
  bc->add_option("--top-k", be->sampling.top_k, "with --temperature: keep the k likeliest tokens (0 = all)")
      ->capture_default_str();
  bc->add_option("--top-p", be->sampling.top_p, "with --temperature: nucleus mass")->capture_default_str();
  bc->add_option("--streams", be->streams,
                 "independent sequences decoded together (each has its own prompt and state)")
      ->capture_default_str();
  bc->add_option("--kernel", be->kernel, "scalar, avx2 or avx512 (default: the CPU's best)");
  bc->add_option("--adapter", be->adapters,
                 "a LoRA adapter file to run the model (.shq) with; repeat it to give the streams "
                 "different adapters in turn (stream b gets adapter b mod count)")
      ->check(CLI::ExistingFile);
  bc->add_flag("--forced-decode", be->forced_decode,
               "decode feeds random tokens drawn up front, not the sampled ones (the sampler "
               "still runs), so runs with different models or adapters decode the same tokens");
  bc->add_flag("--json", be->json, "one JSON line instead of text");
  be->profile.warmup_steps = 0;  // the --warmup runs are already outside the profile
  add_profile_flags(bc, be->profile, kBenchTrace);
  bc->callback([be] { run_bench(*be); });
}

}  // namespace shamn::cli
