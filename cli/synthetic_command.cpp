// `shamn synthetic`: train.bin / val.bin from a Markov chain of known entropy, to
// check a setup end to end (the val loss should approach the printed floor).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "core/check.h"
#include "data/synthetic_corpus.h"
#include "data/token_file.h"

namespace shamn::cli {

namespace {
// 1 GiB of uint32 next tokens.
constexpr int64_t kMaxTransitions = int64_t{1} << 28;

struct SyntheticArgs {
  std::string out;
  int64_t vocab = 64, successors = 4, tokens = 1000000;
  uint64_t seed = 1;
};

void run_synthetic(const SyntheticArgs& a) {
  SHAMN_INPUT_CHECK(a.successors <= a.vocab, "--successors (", a.successors, ") must be <= --vocab (",
                    a.vocab, "): a token's next tokens are distinct");
  SHAMN_INPUT_CHECK(a.vocab * a.successors <= kMaxTransitions, "--vocab x --successors (", a.vocab, " x ",
                    a.successors, ") must be <= ", kMaxTransitions, ": the chain's table is held in memory");
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  SHAMN_INPUT_CHECK(!ec, "cannot create the output directory '", a.out, "': ", ec.message());
  const MarkovCorpus corpus = markov_corpus(a.vocab, a.successors, a.tokens, a.seed);
  // The last 10% is the val file: the same chain, a stretch the model never trains on.
  const auto split = corpus.tokens.begin() + static_cast<std::ptrdiff_t>(a.tokens * 9 / 10);
  write_train_val_files(a.out, std::vector<uint32_t>(corpus.tokens.begin(), split),
                        std::vector<uint32_t>(split, corpus.tokens.end()));
  std::printf(
      "wrote %s/train.bin and val.bin: %lld tokens, vocab %lld; the best possible loss "
      "(entropy rate) is %.4f nats/token\n",
      a.out.c_str(), static_cast<long long>(a.tokens), static_cast<long long>(a.vocab), corpus.entropy_nats);
}
}  // namespace

void register_synthetic_command(CLI::App& app) {
  auto a = std::make_shared<SyntheticArgs>();
  CLI::App* sc =
      app.add_subcommand("synthetic", "write train.bin/val.bin from a Markov chain whose entropy is known");
  sc->add_option("--out", a->out, "directory to write")->required();
  sc->add_option("--vocab", a->vocab, "tokens")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  sc->add_option("--successors", a->successors, "next tokens per token (entropy ln of this)")
      ->capture_default_str()
      ->check(whole_number(1));
  sc->add_option("--tokens", a->tokens, "total tokens (10% go to val.bin)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{20}, int64_t{1} << 31));
  sc->add_option("--seed", a->seed, "chain and walk seed")->capture_default_str()->check(seed_number());
  sc->callback([a] { run_synthetic(*a); });
}

}  // namespace shamn::cli
