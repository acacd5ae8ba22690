#include "cli/shq_info.h"

#include <cinttypes>
#include <cstdio>

#include "core/check.h"
#include "core/config_table.h"
#include "core/lora_scale.h"
#include "core/model_config.h"
#include "data/tokenizer.h"
#include "infer/lora_adapter.h"
#include "infer/shq_file.h"

namespace shamn::cli {

namespace {

void print_model_config(const ModelConfig& c) {
  const MoeOptions moe = c.moe();
  const EmbedOptions embed = c.embed();
  std::string memory;
  for (int64_t l : c.resolved_memory_layers()) {
    if (!memory.empty()) memory += ',';
    memory += std::to_string(l);
  }
  // model.mixer.sparsity and model.moe.sparsity may each override the global one.
  const double mixer_sparsity = c.mixer().out.sparsity, moe_sparsity = moe.up.sparsity;
  const std::string sparsity = mixer_sparsity == moe_sparsity
                                   ? detail::concat(mixer_sparsity)
                                   : detail::concat("mixer ", mixer_sparsity, ", experts ", moe_sparsity);
  std::printf("model           vocab %" PRId64 ", dim %" PRId64 ", %" PRId64
              " layers, sparsity %s (block %" PRId64 ")\n",
              c.vocab_size, c.dim, c.n_layers, sparsity.c_str(), c.block);
  std::printf("embed           %" PRId64 " buckets, %" PRId64 " hashes, %s head\n", embed.buckets,
              embed.hashes, c.tie_head ? "tied" : "untied");
  std::printf("moe             %" PRId64 " groups x %" PRId64 " experts (top %" PRId64 " groups, top %" PRId64
              " experts), hidden %" PRId64 "\n",
              moe.groups, moe.experts_per_group, moe.group_k, moe.k, moe.hidden);
  std::printf("memory          %" PRId64 " slots, top %" PRId64 ", layers %s\n", c.memory_size, c.memory_topk,
              memory.empty() ? "none" : memory.c_str());
}

}  // namespace

void print_shq_info(const std::string& path) {
  const ShqFile file = ShqFile::open(path, ".shq file");
  const ShqHeader& h = file.header();
  const std::string config = file.config_toml();
  const bool adapter = is_lora_config(config, path + " (embedded config)");
  std::printf("file            %s\n", path.c_str());
  std::printf("kind            %s\n", adapter ? "LoRA adapter file (.shq; runs beside its base model file)"
                                              : "model file (.shq; the inference runtime)");
  std::printf("format_version  %u\n", h.version);
  std::printf("quant           %s\n", shq_quant_name(file.quant()));
  std::printf("step            %" PRIu64 "\n", h.step);
  std::printf("file size       %.2f MiB (%" PRIu64 " bytes)\n",
              static_cast<double>(file.file_bytes()) / (1 << 20), file.file_bytes());
  // The base checkpoint's tensors' identity: an adapter's equals its base's.
  std::printf("source_id       %016" PRIx64 "%s\n", h.source_id(), h.source_id() == 0 ? " (unknown)" : "");
  if (adapter) {
    const ConfigTable t = ConfigTable::parse(config, path + " (embedded config)");
    std::printf("lora            rank %" PRId64 ", alpha %g%s, %zu matrices\n",
                t.get_int("lora.rank").value_or(0), t.get_float("lora.alpha").value_or(0),
                lora_scale_note(t.get_bool("lora.rslora").value_or(false)), file.tensors().size() / 2);
  } else {
    print_model_config(ModelConfig::from_toml(config, path + " (embedded config)"));
  }
  constexpr int kDTypes = static_cast<int>(ShqDType::q4_0x16) + 1;
  uint64_t bytes[kDTypes] = {}, count[kDTypes] = {};
  for (const ShqTensor& t : file.tensors()) {
    bytes[static_cast<int>(t.dtype)] += t.bytes;
    ++count[static_cast<int>(t.dtype)];
  }
  std::printf("tensors         %zu\n", file.tensors().size());
  for (int i = 0; i < kDTypes; ++i)
    if (count[i] > 0)
      std::printf("  %-7s %5" PRIu64 " tensors %10.2f MiB\n", shq_dtype_name(static_cast<ShqDType>(i)),
                  count[i], static_cast<double>(bytes[i]) / (1 << 20));
  const std::string tok = file.tokenizer_text();
  if (tok.empty())
    std::printf("tokenizer       none (token ids only)\n");
  else
    std::printf("tokenizer       %" PRId64 " tokens (shamn-bpe)\n",
                Tokenizer::parse(tok, path + " (embedded tokenizer)").vocab_size());
  if (!adapter) std::printf("\n# config\n%s", config.c_str());
}

}  // namespace shamn::cli
