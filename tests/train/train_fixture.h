#pragma once
// A scratch directory holding a Markov-chain token corpus, and the tiny config
// (configs/tiny.toml) pointed at it, for trainer tests.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/hdf5_file.h"
#include "data/synthetic_corpus.h"
#include "data/token_file.h"
#include "tests/mini_model.h"
#include "tests/scratch_dir.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace shamn::test {

class TrainFixture {
 public:
  explicit TrainFixture(const std::string& name, int64_t vocab = 64, int64_t successors = 4)
      : dir_(scratch_root() / name) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const MarkovCorpus train = markov_corpus(vocab, successors, 200000, 7);
    const MarkovCorpus val = markov_corpus(vocab, successors, 20000, 7);  // same chain
    write_token_file(path("train.bin"), train.tokens);
    write_token_file(path("val.bin"), std::vector<uint32_t>(val.tokens.begin() + 1000, val.tokens.end()));
    entropy_ = train.entropy_nats;
    vocab_ = vocab;
  }
  ~TrainFixture() { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  double entropy() const { return entropy_; }

  // configs/tiny.toml on this corpus, writing into run_dir, plus `extra` overrides.
  RunConfig config(const std::string& run_dir, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> sets = {"data.train_path=\"" + path("train.bin") + "\"",
                                     "data.val_path=\"" + path("val.bin") + "\"",
                                     "model.vocab_size=" + std::to_string(vocab_),
                                     "model.embed.buckets=" + std::to_string(vocab_),
                                     "train.out_dir=\"" + path(run_dir) + "\"",
                                     "optim.warmup_steps=2",
                                     "log.progress=\"never\""};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return RunConfig::from_file(std::string(SHAMN_SOURCE_DIR) + "/configs/tiny.toml", sets);
  }

 private:
  std::filesystem::path dir_;
  double entropy_ = 0;
  int64_t vocab_ = 0;
};

// A trainer that prints nothing (the tests read metrics.jsonl instead).
inline TrainOptions quiet() {
  TrainOptions o;
  o.quiet = true;
  return o;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// metrics.jsonl without the timing fields, which differ from run to run.
inline std::string metrics_without_timing(const std::string& path) {
  std::istringstream in(read_text(path));
  std::string line, out;
  while (std::getline(in, line)) {
    for (const char* field : {",\"tokens_per_s\":", ",\"elapsed_s\":"}) {
      const size_t at = line.find(field);
      if (at == std::string::npos) continue;
      const size_t end = line.find_first_of(",}", at + 1);
      line.erase(at, end - at);
    }
    out += line + "\n";
  }
  return out;
}

// Every dataset of two HDF5 files is bitwise equal (and they hold the same ones).
inline void require_same_tensors(const std::string& a, const std::string& b) {
  const Hdf5Reader ra(a), rb(b);
  for (const char* group : {"/model", "/optim"}) {
    const auto names = ra.datasets(group);
    REQUIRE(names == rb.datasets(group));
    for (const std::string& n : names) {
      INFO(n);
      REQUIRE(bitwise_equal(ra.read_tensor(n), rb.read_tensor(n)));
    }
  }
}

}  // namespace shamn::test
