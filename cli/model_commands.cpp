// `shamn init` and `shamn loss`: a fresh model checkpoint, and one batch's loss
// (and gradients) from a checkpoint, or a base and a LoRA adapter checkpoint,
// and a token file (with --lora-dropout, under the masks of one training pass).
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/json_text.h"
#include "core/atomic_file.h"
#include "core/config_table.h"
#include "core/hdf5_file.h"
#include "data/token_file.h"
#include "layers/lora.h"
#include "layers/shamn_model.h"
#include "train/adapter_checkpoint.h"
#include "train/model_checkpoint.h"
#include "train/run_config.h"

namespace shamn::cli {

namespace {

struct InitArgs {
  std::string config, out;
  uint64_t seed = 1;
  std::string scheme = "normal";
  double std = 0.02;
  bool scale_residual = false;
};

struct LossArgs {
  std::string checkpoint, adapter, data, grads;
  int64_t batch = 1, seq = 64;
  // With lora_dropout > 0: the masks training draws in forward pass `pass` of a
  // run seeded `seed` (train.seed; pass = step x grad_accum + micro-batch).
  double lora_dropout = 0;
  uint64_t seed = 1, pass = 0;
};

void run_init(const InitArgs& a) {
  const ModelConfig config = ModelConfig::from_table(ConfigTable::parse_file(a.config));
  Shamn model(config);
  SHAMN_INPUT_CHECK(a.std > 0 && a.std <= 1, "--init-std must lie in (0, 1], got ", a.std);
  SHAMN_INPUT_CHECK(!a.scale_residual || a.scheme == "normal",
                    "--init-scale-residual applies to --init normal (fan_in scales the residual outputs "
                    "always), got --init ",
                    a.scheme);
  WeightInit how;
  how.scheme = *parse_init_scheme(a.scheme);  // CLI11 checked it
  how.std = a.std;
  how.scale_residual = a.scale_residual;
  model.init(a.seed, how);
  save_model_checkpoint(a.out, model, config.to_toml(), 0);
  std::printf("wrote %s: %" PRId64 " parameters (seed %" PRIu64 ")\n", a.out.c_str(), model.parameter_count(),
              a.seed);
}

// Puts the adapters of a LoRA run's checkpoint on `model` (its base, loaded
// from base_path), refusing them when they were trained on another base, and
// freezes the base: gradients then flow to the adapters only.
void load_adapter(const std::string& adapter_path, const std::string& base_path, Shamn& model,
                  double dropout) {
  const Hdf5Reader reader(adapter_path);
  AdapterIdentity saved = read_adapter_identity(reader);
  saved.lora.dropout = dropout;
  SHAMN_INPUT_CHECK(read_checkpoint_config(reader).to_toml() == model.config().to_toml(), "--adapter '",
                    adapter_path, "' was trained on a model whose [model] tables differ from those of '",
                    base_path, "'");
  attach_lora(model, model.config(), saved.lora);
  check_adapter_checkpoint(reader, {base_checksum(model), base_path, saved.lora});
  load_model_tensors(reader, model, TensorSet::adapters);
  freeze_base(model);
}

void run_loss(const LossArgs& a) {
  Hdf5Reader reader(a.checkpoint);
  const ModelConfig config = read_checkpoint_config(reader);
  Shamn model(config);
  load_model_tensors(reader, model);
  SHAMN_INPUT_CHECK(a.lora_dropout >= 0 && a.lora_dropout < 1, "--lora-dropout must lie in [0, 1), got ",
                    a.lora_dropout);
  SHAMN_INPUT_CHECK(a.lora_dropout == 0 || !a.adapter.empty(), "--lora-dropout needs --adapter");
  if (!a.adapter.empty()) load_adapter(a.adapter, a.checkpoint, model, a.lora_dropout);

  const TokenFile tokens(a.data);
  const int64_t B = a.batch, T = a.seq;
  int64_t window_tokens = 0;
  const bool fits = !__builtin_mul_overflow(B, T, &window_tokens) && window_tokens < tokens.size();
  SHAMN_INPUT_CHECK(fits, "token file '", a.data, "' has ", tokens.size(), " tokens; --batch ", B, " --seq ",
                    T, " needs ", B, " x ", T, " + 1");
  Tensor inputs = Tensor::empty({B, T}, DType::i32);
  Tensor targets = Tensor::empty({B, T}, DType::i32);
  // Window i: inputs tokens[i*T, i*T+T), targets shifted by one.
  for (int64_t i = 0; i < B; ++i) {
    const Tensor w = tokens.window(i * T, T + 1, config.vocab_size);
    for (int64_t t = 0; t < T; ++t) {
      inputs.data<int32_t>()[i * T + t] = w.data<int32_t>()[t];
      targets.data<int32_t>()[i * T + t] = w.data<int32_t>()[t + 1];
    }
  }
  const bool want_grads = !a.grads.empty();
  if (want_grads) check_output_path(a.grads);  // before the loss is printed
  std::unique_ptr<NoGradGuard> no_grad;
  if (!want_grads) no_grad = std::make_unique<NoGradGuard>();
  std::optional<LoraDropoutPass> noise;
  if (a.lora_dropout > 0) noise.emplace(model, a.seed, a.pass);
  const Shamn::Loss loss = model.loss(inputs, targets);
  noise.reset();  // the backward pass redraws each mask from its node's key
  const nlohmann::ordered_json out = {
      {"loss", loss.loss.value().item()}, {"ce", loss.ce.value().item()}, {"aux", loss.aux.value().item()}};
  std::printf("%s\n", json_text(out).c_str());
  if (!want_grads) return;
  loss.loss.backward();
  Hdf5Writer writer(a.grads, "grads");
  for (const NamedVar& p : model.named_parameters()) {
    if (!p.var.requires_grad()) continue;  // a frozen base under --adapter
    // A parameter the batch never reached (an expert no token chose) has gradient 0.
    const Tensor g = p.var.grad().defined() ? p.var.grad() : Tensor::zeros(p.var.shape());
    writer.write_tensor(checkpoint_path("/model", p.name), g);
  }
  writer.set_string_attribute("kind", "gradients");
  writer.set_string_attribute("config", config.to_toml());
  writer.commit();
}

}  // namespace

void register_model_commands(CLI::App& app) {
  auto init = std::make_shared<InitArgs>();
  CLI::App* ic = app.add_subcommand("init", "write a freshly initialised model checkpoint");
  ic->add_option("config", init->config, "TOML config with a [model] table")
      ->required()
      ->check(CLI::ExistingFile);
  ic->add_option("-o,--out", init->out, "checkpoint to write (.h5)")->required();
  ic->add_option("--seed", init->seed, "initialisation seed")->capture_default_str()->check(seed_number());
  ic->add_option("--init", init->scheme, "weight init scheme, as train.init")
      ->check(CLI::IsMember({"normal", "fan_in"}))
      ->capture_default_str();
  ic->add_option("--init-std", init->std, "the normal scheme's std, as train.init_std")
      ->capture_default_str();
  ic->add_flag("--init-scale-residual", init->scale_residual,
               "normal: the residual outputs at std / sqrt(2L), as train.init_scale_residual");
  ic->callback([init] { run_init(*init); });

  auto loss = std::make_shared<LossArgs>();
  CLI::App* lc = app.add_subcommand(
      "loss", "print one batch's loss as JSON {\"loss\",\"ce\",\"aux\"} (windows i*T of the file)");
  lc->add_option("checkpoint", loss->checkpoint,
                 "training or model-only checkpoint (.h5; not a .shq model file: use eval)")
      ->required();
  lc->add_option("--data", loss->data, "token file (llm.c format)")->required();
  lc->add_option("--batch", loss->batch, "windows B")->capture_default_str()->check(whole_number(1));
  lc->add_option("--seq", loss->seq, "window length T")->capture_default_str()->check(whole_number(1));
  lc->add_option("--adapter", loss->adapter,
                 "LoRA adapter checkpoint trained on this base: the loss of the adapted model; --grads "
                 "then holds the adapters' gradients only");
  lc->add_option("--grads", loss->grads, "also write every parameter's gradient to this .h5");
  lc->add_option("--lora-dropout", loss->lora_dropout,
                 "with --adapter: dropout at this rate on the adapters' inputs, with the masks of "
                 "training's forward pass --pass of a run with train.seed = --seed")
      ->capture_default_str();
  lc->add_option("--seed", loss->seed, "--lora-dropout's run seed (train.seed)")
      ->capture_default_str()
      ->check(seed_number());
  lc->add_option("--pass", loss->pass, "--lora-dropout's pass: step x train.grad_accum + micro-batch")
      ->capture_default_str();
  lc->callback([loss] { run_loss(*loss); });
}

}  // namespace shamn::cli
