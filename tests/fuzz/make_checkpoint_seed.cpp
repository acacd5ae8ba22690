// Writes the checkpoint fuzz target's seed: a training checkpoint of the model
// in checkpoint_model.h after two AdamW steps (so the moments are non-zero).
//   make_checkpoint_seed OUT.h5
#include <cstdio>

#include "core/rng.h"
#include "layers/shamn_model.h"
#include "optim/adamw.h"
#include "tests/fuzz/checkpoint_model.h"
#include "train/train_checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.h5\n", argv[0]);
    return 2;
  }
  using namespace shamn;
  const ModelConfig config = ModelConfig::from_toml(fuzz::kCheckpointModelToml, "seed");
  Shamn model(config);
  model.init(1);
  AdamW optimizer(split_weight_decay(model.named_parameters(), 0.1));
  Tensor tokens = Tensor::empty({1, 4}, DType::i32);
  Tensor targets = Tensor::empty({1, 4}, DType::i32);
  for (int i = 0; i < 4; ++i) {
    tokens.data<int32_t>()[i] = i;
    targets.data<int32_t>()[i] = i + 1;
  }
  for (int step = 0; step < 2; ++step) {
    optimizer.zero_grad();
    model.loss(tokens, targets).loss.backward();
    optimizer.step(1e-2);
  }
  TrainState state;
  state.step = 2;
  state.optim_step = 2;
  state.data_seed = 1;
  state.data_position = 2;
  state.best_val_loss = 2.5;
  state.tokens_seen = 8;
  state.elapsed_s = 0.25;
  save_train_checkpoint(argv[1], model, optimizer,
                        std::string(fuzz::kCheckpointModelToml) + "\n[data]\ntrain_path = \"t.bin\"\n",
                        state);
  return 0;
}
