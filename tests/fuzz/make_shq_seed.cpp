// Writes the .shq loader fuzz target's committed seeds (tests/fuzz/shq_loader/seeds/)
// without the GCC-built CLI: the model of seed_model.toml, initialised with
// seed 1 as `shamn init` does, exported as int4 without a tokenizer and as int8
// with a small tokenizer (so the embedded tokenizer parser is reached too).
//   make_shq_seed tests/fuzz/seed_model.toml OUT_DIR
#include <cstdio>
#include <string>

#include "core/config_table.h"
#include "data/tokenizer.h"
#include "infer/export_model.h"
#include "layers/shamn_model.h"
#include "train/model_checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SEED_MODEL.toml OUT_DIR\n", argv[0]);
    return 2;
  }
  using namespace shamn;
  const std::string out = argv[2];
  const ModelConfig config = ModelConfig::from_table(ConfigTable::parse_file(argv[1]));
  Shamn model(config);
  model.init(1);
  const std::string checkpoint = out + "/model.h5";
  save_model_checkpoint(checkpoint, model, config.to_toml(), 0);
  export_model(checkpoint, {ShqQuant::int4, "", {}}, out + "/int4.shq");
  const Tokenizer tokenizer({{104, 101}, {116, 256}, {32, 257}, {108, 108}, {111, 32}, {259, 260}});
  export_model(checkpoint, {ShqQuant::int8, tokenizer.to_text(), {}}, out + "/int8_tokenizer.shq");
  std::remove(checkpoint.c_str());
  return 0;
}
