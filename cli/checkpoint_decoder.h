#pragma once
// Decoding from a checkpoint (`shamn generate MODEL.h5`). The autograd model
// keeps no decode state, so each step reruns it over the receptive field, the
// last L*(K-1)+1 tokens: the causal convolutions are the model's only token
// mixing (memory and MoE act on each token alone), so those tokens give the
// same logits as the whole context. That is the checkpoint's own forward, the
// one `eval MODEL.h5` measures, with no export, temporary file or rounding in
// between; at R = L*(K-1)+1 tokens per step it costs R times a decode step.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/model_source.h"
#include "data/tokenizer.h"

namespace shamn::cli {

class ReceptiveFieldDecoder {
 public:
  explicit ReceptiveFieldDecoder(const ModelSource& model);
  // Appends n >= 1 tokens to the context and writes the logits [V] that follow them.
  void feed(const int32_t* tokens, int64_t n, float* logits);
  int64_t receptive_field() const { return field_; }

 private:
  LogitFunction forward_;
  int64_t field_ = 0, vocab_ = 0;
  std::vector<int32_t> context_;
  std::vector<float> scratch_;  // [field, V]
};

// The tokenizer a checkpoint decodes with: `path` when given, else the config's
// data.tokenizer; an InputError says which is missing.
Tokenizer checkpoint_tokenizer(const std::string& checkpoint, const std::string& path, int64_t vocab);

}  // namespace shamn::cli
