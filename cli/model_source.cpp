#include "cli/model_source.h"

#include <cstring>
#include <fstream>

#include "autograd/variable.h"
#include "core/hdf5_file.h"
#include "core/kernel_level.h"
#include "core/parallel.h"
#include "train/model_checkpoint.h"

namespace shamn::cli {

bool is_shq_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SHAMN_INPUT_CHECK(in.good(), "cannot open '", path, "'");
  char magic[sizeof(kShqMagic)] = {};
  in.read(magic, sizeof(magic));
  return in.gcount() == sizeof(magic) && std::memcmp(magic, kShqMagic, sizeof(magic)) == 0;
}

void apply_kernel_flag(const std::string& kernel) {
  if (!kernel.empty()) set_kernel_level(kernel_level_from_string(kernel, "--kernel"));
}

ModelSource open_model_source(const std::string& path, const std::string& adapter) {
  ModelSource s;
  s.path = path;
  if (is_shq_file(path)) {
    s.runtime = std::make_unique<InferModel>(ShqFile::open(path));
    s.config = s.runtime->config();
    if (!adapter.empty())
      s.adapter = std::make_unique<LoraAdapter>(ShqFile::open(adapter, "adapter file"), *s.runtime);
    return s;
  }
  SHAMN_INPUT_CHECK(adapter.empty(), "--adapter runs with a model file (.shq), not the checkpoint '", path,
                    "': export the base first");
  const Hdf5Reader reader(path);
  s.config = read_checkpoint_config(reader);
  s.autograd = std::make_unique<Shamn>(s.config);
  load_model_tensors(reader, *s.autograd);
  return s;
}

std::string ModelSource::kind() const {
  return runtime ? shq_quant_name(runtime->file().quant()) : "checkpoint";
}

LogitFunction ModelSource::logit_function() const {
  if (runtime) {
    const InferModel* m = runtime.get();
    const LoraAdapter* a = adapter.get();
    return [m, a](const int32_t* tokens, int64_t T, float* logits) {
      DecodeState state = m->new_state();
      m->forward(tokens, T, state, logits, /*all_logits=*/true, a);
    };
  }
  const Shamn* m = autograd.get();
  return [m](const int32_t* tokens, int64_t T, float* logits) {
    NoGradGuard no_grad;
    const Tensor in =
        Tensor::from_data<int32_t>({1, T}, std::span<const int32_t>(tokens, static_cast<size_t>(T)));
    const Tensor out = m->logits(in).value();
    std::memcpy(logits, out.data<float>(), out.nbytes());
  };
}

LossFunction ModelSource::loss_function() const {
  if (runtime) {
    const InferModel* m = runtime.get();
    const LoraAdapter* a = adapter.get();
    return [m, a](const int32_t* tokens, int64_t T, const int32_t* targets, double* losses) {
      DecodeState state = m->new_state();
      m->forward_losses(tokens, T, state, targets, losses, a);
    };
  }
  return losses_from_logits(logit_function(), config.vocab_size);
}

int64_t ModelSource::concurrent_windows() const { return runtime ? num_threads() : 1; }

}  // namespace shamn::cli
